"""A new agent's substrate starts with the reference's files (AGENTS.md, SOUL.md, TOOLS.md, IDENTITY.md, USER.md,
HEARTBEAT.md, BOOTSTRAP.md, MEMORY.md), each its first recorded version: real data dirs, real runtimes, a real
client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Connect, data

from managed_tools.sandbox.mounts import substrate_dir
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.substrate.defaults import DEFAULT_FILES, SOURCE

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]
NAMES = ["AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md", "HEARTBEAT.md", "BOOTSTRAP.md", "MEMORY.md"]


async def version_count(config: ServeConfig) -> int:
    async with open_runtime(config) as runtime, runtime.db.read() as tx:
        return int(await tx.scalar("SELECT COUNT(*) FROM substrate_versions"))


async def test_a_new_agent_starts_with_first_versions(config: ServeConfig, connect: Connect) -> None:
    assert list(DEFAULT_FILES) == NAMES
    async with open_runtime(config) as runtime, connect(runtime) as client:
        listed = data(await client.call_tool("resources_list", {}))
        identity = data(await client.call_tool("read", {"path": "/workspace/agent/IDENTITY.md"}))
        history = data(await client.call_tool("resources_list_versions", {"targetPath": "SOUL.md"}))
        staged = data(await client.call_tool("resources_stage_from_substrate", {"sourcePath": "USER.md"}))
    files = {f["path"]: f for f in listed["substrateFiles"]}
    assert sorted(files) == sorted(f"/workspace/agent/{name}" for name in NAMES)
    assert all(f["latestVersionId"] is not None for f in files.values())
    assert "Agent id: `default`" in identity["content"]
    [first] = history["versions"]
    assert first["sourcePath"] == SOURCE and first["sessionId"] is None
    assert first["versionId"] == files["/workspace/agent/SOUL.md"]["latestVersionId"]
    assert staged["targetPath"] == "/workspace/USER.md" and not staged["divergedFromSource"]
    on_disk = (substrate_dir(config.data_dir, config.agent) / "TOOLS.md").read_text()
    assert '`agent_describe_setup {sections: ["policy"]}`' in on_disk  # the template's braces came out single


async def test_only_once_and_never_over_a_persons_file(config: ServeConfig) -> None:
    root = substrate_dir(config.data_dir, config.agent)
    root.mkdir(parents=True)
    (root / "SOUL.md").write_text("# Mine\n")
    assert await version_count(config) == len(NAMES) - 1
    assert (root / "SOUL.md").read_text() == "# Mine\n"
    (root / "BOOTSTRAP.md").unlink()  # a person removed it: the agent is no longer new, so it stays gone
    assert await version_count(config) == len(NAMES) - 1
    assert not (root / "BOOTSTRAP.md").exists()


async def test_each_agent_has_its_own(config: ServeConfig) -> None:
    other = config.model_copy(update={"agent": "reviewer"})
    assert await version_count(config) == len(NAMES)
    assert await version_count(other) == 2 * len(NAMES)
    text = (substrate_dir(config.data_dir, "reviewer") / "AGENTS.md").read_text()
    assert "agent\n`reviewer`" in text or "agent `reviewer`" in text


async def test_config_can_turn_them_off(workspace: Path, config: ServeConfig) -> None:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    (config.data_dir / "config.json").write_text(json.dumps({"substrateDefaults": False}))
    off = ServeConfig.build(workspace=workspace, data_dir=config.data_dir, database=config.database)
    assert not off.substrate_defaults
    assert await version_count(off) == 0
    assert not any(substrate_dir(config.data_dir, config.agent).iterdir())
