"""The user-wide config.json (`<user config dir>/managed-tools/config.json`), merged under a workspace's own: seen
through a real MCP client, as a model would meet it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Connect

from managed_tools.server.config.config_files import user_config_file
from managed_tools.server.config.serve_config import ConfigError, ServeConfig
from managed_tools.server.runtime.opening import open_runtime

pytestmark = pytest.mark.anyio
META = "managed-tools/tool"


def write(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")


async def policies(config: ServeConfig, connect: Connect, mode: str = "auto") -> dict[str, str]:
    async with open_runtime(config) as runtime, connect(runtime, mode=mode) as client:
        listing = await client.list_tools()
    return {tool.name: (tool.meta or {})[META].get("permissionPolicy", "always_allow") for tool in listing.tools}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_policy_written_once_applies_and_the_workspace_wins(
    workspace: Path, tmp_path: Path, connect: Connect, mode: str
) -> None:
    write(user_config_file(), {"policy": {"read": "always_ask", "glob": "always_ask"}, "toolsets": ["files"]})
    data_dir = tmp_path / "data"
    alone = await policies(ServeConfig.build(workspace=workspace, data_dir=data_dir), connect, mode)
    assert (alone["read"], alone["glob"], alone["grep"]) == ("always_ask", "always_ask", "always_allow")
    assert set(alone) == {"read", "write", "edit", "glob", "grep"}  # the user's toolsets too

    write(data_dir / "config.json", {"policy": {"read": "always_allow"}, "toolsets": ["files", "memory"]})
    both = await policies(ServeConfig.build(workspace=workspace, data_dir=data_dir), connect, mode)
    assert both["read"] == "always_allow"  # the workspace's entry for read wins
    assert both["glob"] == "always_ask"  # the user's entry for glob stays: policy merges tool by tool
    assert "memory_write" in both  # toolsets is replaced whole by the workspace's


async def test_mcp_servers_merge_by_name_and_null_removes_one(workspace: Path, tmp_path: Path) -> None:
    write(user_config_file(), {"mcpServers": {"git": {"command": "git-mcp"}, "web": {"url": "https://a.example/mcp"}}})
    data_dir = tmp_path / "data"
    write(data_dir / "config.json", {"mcpServers": {"web": None, "docs": {"url": "https://b.example/mcp"}}})
    config = ServeConfig.build(workspace=workspace, data_dir=data_dir)
    assert sorted(config.mcp_servers) == ["docs", "git"]


async def test_an_error_names_the_file_it_is_in(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write(user_config_file(), {"mcpServers": {"git": {"comand": "git-mcp"}}})
    with pytest.raises(ConfigError) as user_error:
        ServeConfig.build(workspace=workspace, data_dir=data_dir)
    assert str(user_config_file()) in str(user_error.value)
    assert "unknown key 'comand' (did you mean 'command'?)" in str(user_error.value)
    write(user_config_file(), {})
    write(data_dir / "config.json", {"approvalWaitSeconds": -1})
    with pytest.raises(ConfigError, match=str(data_dir / "config.json")):
        ServeConfig.build(workspace=workspace, data_dir=data_dir)


async def test_a_user_config_dir_a_tool_could_write_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    with pytest.raises(ConfigError, match=r"user config directory .* is inside the workspace"):
        ServeConfig.build(workspace=home, data_dir=tmp_path / "data")  # whether a config.json exists yet or not
    vault = tmp_path / "vault"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(vault / "config"))
    with pytest.raises(ConfigError, match=r"user config directory .* is inside the vault 'notes'"):
        ServeConfig.build(workspace=tmp_path / "ws", data_dir=tmp_path / "data", vaults={"notes": vault})


@pytest.mark.both_backends
async def test_the_instructions_name_the_engine_state_is_kept_in(config: ServeConfig, connect: Connect) -> None:
    async with open_runtime(config) as runtime, connect(runtime) as client:
        said = client.instructions or ""
    engine = "SQLite" if config.database is None else "PostgreSQL"
    other = "PostgreSQL" if config.database is None else "SQLite"
    assert f"state is versioned in {engine}" in said and other not in said
