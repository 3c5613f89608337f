"""Skills: found in each directory, overridden by name, filtered, read by exact name, never through a link."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ERAS, Connect, data, error_text

from managed_tools.server.config import CONFIG_FILE, ServeConfig
from managed_tools.server.runtime import open_runtime, user_skills_dir
from managed_tools.stores.mounts import substrate_dir

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
