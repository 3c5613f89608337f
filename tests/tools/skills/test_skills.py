"""Skills: found in each directory, overridden by name, filtered, read by exact name, never through a link."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, error_text
from mcp import MCPError

from managed_tools.sandbox.mounts import substrate_dir
from managed_tools.server.config.data_dir import user_skills_dir
from managed_tools.server.config.serve_config import CONFIG_FILE, ServeConfig
from managed_tools.server.runtime.opening import open_runtime

pytestmark = pytest.mark.anyio


def default(workspace: Path) -> ServeConfig:
    return ServeConfig.build(workspace=workspace, data_dir=None)


def write_skill(directory: Path, folder: str, name: str | None, description: str, body: str = "Do it well.") -> Path:
    path = directory / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    front = ([f"name: {name}"] if name else []) + [f"description: {json.dumps(description)}"]
    path.write_text("---\n" + "\n".join(front) + f"\n---\n# Title\n\n{body}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("mode", ERAS)
async def test_each_directory_later_ones_override(workspace: Path, connect: Connect, tmp_path: Path, mode: str) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    write_skill(workspace / ".agents/skills", "a", "alpha", "from agents")
    write_skill(workspace / ".agents/skills", "shared", "shared", "agents version")
    write_skill(workspace / ".claude/skills", "nested/b", "beta", "from claude")
    write_skill(workspace / ".claude/skills", "shared", "shared", "claude version")
    write_skill(substrate_dir(config.data_dir, "default") / "skills", "c", "gamma", "from substrate")
    write_skill(user_skills_dir(), "d", None, "from the user")  # name falls back to its folder
    write_skill(user_skills_dir(), "shared", "shared", "user version")
    async with open_runtime(config) as runtime, connect(runtime, mode=mode) as client:
        listed = data(await client.call_tool("skills_list", {}))
        by_name = {s["name"]: s for s in listed["skills"]}
        assert list(by_name) == ["alpha", "beta", "d", "gamma", "shared"]
        assert by_name["alpha"]["source"] == "workspace-agents"
        assert by_name["beta"]["source"] == "workspace-claude"
        assert by_name["gamma"]["source"] == "agent-substrate"
        assert by_name["d"]["source"] == "user"
        assert by_name["shared"]["description"] == "user version"
        assert by_name["alpha"]["nextStep"] == {
            "tool": "skills_read", "args": {"name": "alpha"}, "rationale": "Read the skill's instructions."
        }  # fmt: skip
        read = data(await client.call_tool("skills_read", {"name": "beta", "maxChars": 20}))
        assert read["filePath"] == "/workspace/.claude/skills/nested/b/SKILL.md"
        assert read["truncated"] and read["content"] == "---\nname: beta\ndescr"
        found = data(await client.call_tool("skills_search", {"query": "claude"}))
        assert [h["name"] for h in found["hits"]] == ["beta"]
        assert str(tmp_path) not in json.dumps([listed, read, found])  # no host paths


@pytest.mark.parametrize("mode", ERAS)
async def test_unknown_skill_is_one_clear_error(workspace: Path, connect: Connect, mode: str) -> None:
    write_skill(workspace / ".agents/skills", "a", "alpha", "here")
    async with open_runtime(default(workspace)) as runtime, connect(runtime, mode=mode) as client:
        text = error_text(await client.call_tool("skills_read", {"name": "alph"}))
    assert "Unknown skill: alph" in text and "alpha" in text and "Traceback" not in text


def write_config(data_dir: Path, skills: dict[str, object]) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / CONFIG_FILE).write_text(json.dumps({"skills": skills}), encoding="utf-8")


async def test_config_directories_replace_and_flags_add(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    write_skill(workspace / ".agents/skills", "a", "alpha", "default directory")
    configured, flagged = tmp_path / "configured", tmp_path / "flagged"
    write_skill(configured, "x", "xray", "configured")
    write_skill(configured, "s", "same", "configured version")
    write_skill(flagged, "s", "same", "flag version")
    write_config(tmp_path / "data", {"directories": [str(configured)]})
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data", skills_dirs=(flagged,))
    async with open_runtime(config) as runtime, connect(runtime) as client:
        listed = data(await client.call_tool("skills_list", {}))["skills"]
    assert [(s["name"], s["source"], s["description"]) for s in listed] == [
        ("same", "skills-dir", "flag version"),
        ("xray", "config", "configured"),
    ]


@pytest.mark.parametrize(("skills", "expected"), [
    ({"enabled": False}, []),
    ({"include": []}, []),
    ({"include": ["beta", "nobody"]}, ["beta"]),
])  # fmt: skip
async def test_enabled_and_include_filters(
    workspace: Path, tmp_path: Path, connect: Connect, skills: dict[str, object], expected: list[str]
) -> None:
    write_skill(workspace / ".agents/skills", "a", "alpha", "one")
    write_skill(workspace / ".agents/skills", "b", "beta", "two")
    write_config(tmp_path / "data", skills)
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    async with open_runtime(config) as runtime, connect(runtime) as client:
        listed = data(await client.call_tool("skills_list", {}))
    assert [s["name"] for s in listed["skills"]] == expected


async def test_a_skill_linking_out_of_its_directory_is_never_read(
    workspace: Path, tmp_path: Path, connect: Connect
) -> None:
    outside = write_skill(tmp_path / "outside", "secret", "secret", "SECRET-CANARY")
    skills = workspace / ".agents/skills"
    (skills / "linked-file").mkdir(parents=True)
    (skills / "linked-file" / "SKILL.md").symlink_to(outside)
    (skills / "linked-dir").symlink_to(outside.parent, target_is_directory=True)
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "skills").symlink_to(outside.parent.parent, target_is_directory=True)
    write_skill(skills, "ok", "fine", "inside")
    async with open_runtime(default(workspace)) as runtime, connect(runtime) as client:
        listed = data(await client.call_tool("skills_list", {}))
        refused = error_text(await client.call_tool("skills_read", {"name": "secret"}))
    assert [s["name"] for s in listed["skills"]] == ["fine"]
    assert "Unknown skill: secret" in refused and "CANARY" not in json.dumps(listed)


async def test_bad_frontmatter_is_skipped(workspace: Path, connect: Connect) -> None:
    broken = workspace / ".agents/skills/broken/SKILL.md"
    broken.parent.mkdir(parents=True)
    broken.write_text("---\nname: [unclosed\n---\nbody\n", encoding="utf-8")
    listy = workspace / ".agents/skills/listy/SKILL.md"
    listy.parent.mkdir(parents=True)
    listy.write_text("---\n- a\n- b\n---\nbody\n", encoding="utf-8")
    write_skill(workspace / ".agents/skills", "ok", None, "")  # empty description: the first prose line
    async with open_runtime(default(workspace)) as runtime, connect(runtime) as client:
        listed = data(await client.call_tool("skills_list", {}))["skills"]
    assert [(s["name"], s["description"]) for s in listed] == [("ok", "Do it well.")]


async def test_skills_are_resources_with_their_sha256(workspace: Path, connect: Connect) -> None:
    path = write_skill(workspace / ".agents/skills", "a", "alpha", "here")
    async with open_runtime(default(workspace)) as runtime, connect(runtime, "legacy") as client:
        listed = {r.uri: r for r in (await client.list_resources()).resources}
        read = await client.read_resource("skill://alpha/SKILL.md")
        with pytest.raises(MCPError, match="Unknown skill: nobody"):
            await client.read_resource("skill://nobody/SKILL.md")
    resource = listed["skill://alpha/SKILL.md"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert resource.meta == {"sha256": digest} and resource.description == "here"
    content = read.contents[0]
    assert isinstance(content, types.TextResourceContents)
    assert content.text == path.read_text() and content.meta == {"sha256": digest}


async def test_hot_reload_notifies_handshake_listers(workspace: Path, connect: Connect) -> None:
    skills = workspace / ".agents/skills"
    write_skill(skills, "a", "alpha", "first")
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            changed.set()

    config = default(workspace)
    async with open_runtime(config) as runtime, connect(runtime, "legacy", message_handler=on_message) as client:
        await client.list_resources()
        await anyio.sleep(0.5)  # the watcher is up
        write_skill(skills, "b", "beta", "added while serving")
        with anyio.fail_after(5):
            await changed.wait()
        uris = [r.uri for r in (await client.list_resources()).resources]
    assert "skill://beta/SKILL.md" in uris


async def test_hot_reload_notifies_modern_listeners(workspace: Path, connect: Connect) -> None:
    skills = workspace / ".agents/skills"
    path = write_skill(skills, "a", "alpha", "first")
    async with open_runtime(default(workspace)) as runtime, connect(runtime) as client:
        async with client.listen(resources_list_changed=True, resource_subscriptions=["skill://alpha/SKILL.md"]) as sub:
            await anyio.sleep(0.5)
            path.write_text("---\nname: alpha\ndescription: second\n---\n", encoding="utf-8")
            events: list[Any] = []
            with anyio.fail_after(5):
                async for event in sub:
                    events.append(event)
                    if len(events) == 2:
                        break
        listed = data(await client.call_tool("skills_list", {}))["skills"]
    assert {type(e).__name__ for e in events} == {"ResourcesListChanged", "ResourceUpdated"}
    assert listed[0]["description"] == "second"


async def test_setup_contract_shows_skill_drift(workspace: Path, connect: Connect) -> None:
    path = write_skill(workspace / ".agents/skills", "a", "alpha", "first")
    async with open_runtime(default(workspace)) as runtime:
        async with connect(runtime) as client:
            first = data(await client.call_tool("agent_describe_setup", {}))
        path.write_text("---\nname: alpha\ndescription: changed\n---\n", encoding="utf-8")
        async with connect(runtime) as client:
            compared = data(await client.call_tool("agent_compare_setup", {"sessionId": first["sessionId"]}))
    skills = first["agentSetup"]["skills"]
    assert skills["count"] == 1 and skills["skills"][0]["name"] == "alpha"
    assert skills["skills"][0]["sha256"] != hashlib.sha256(path.read_bytes()).hexdigest()
    assert compared["changedSections"] == ["skills"]
