"""sandbox_execute runs each action as the tool it routes to (issue 23 N6): that tool's policy (`--ask`, config.json
`policy`), permission pause, events and serving (`--exclude-tools`, `--toolsets`) apply; nothing is sidestepped."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import ERAS, data, error_text
from mcp import Client
from mcp.client import ClientRequestContext
from test_permissions import cli

from managed_tools.server.config.serve_config import Selecting, ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime

pytestmark = pytest.mark.anyio

TEXT = {"path": "w.txt", "content": "written"}
WRITE: dict[str, Any] = {"name": "write_text", "input": TEXT}
APPEND: dict[str, Any] = {"name": "append_text", "input": TEXT}
WRITING: list[dict[str, Any]] = [WRITE, APPEND, {"name": "mkdir", "input": {"path": "made"}}]


@asynccontextmanager
async def served(config: ServeConfig, mode: str = "legacy", **kwargs: Any) -> AsyncIterator[Client]:
    """A client of a server with this configuration (no elicitation unless given: an always_ask call fails closed)."""
    async with open_runtime(config) as runtime:
        server = build_server(runtime, transport="memory", approval_wait_seconds=5)
        async with Client(server, mode=mode, **kwargs) as client:
            yield client


def approving(seen: list[str]) -> Any:
    async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    return on_elicit


def action_of(result: types.CallToolResult) -> dict[str, Any]:
    return dict((result.meta or {})["managed-tools/requiresAction"])


async def test_ask_write_holds_every_writing_action(workspace: Path) -> None:
    """`--ask write`: write_text, append_text and mkdir wait for a person, as `write` itself does."""
    async with served(ServeConfig.build(workspace=workspace, data_dir=None, ask=("write",))) as client:
        held = [await client.call_tool("sandbox_execute", call) for call in WRITING]
        read = data(await client.call_tool("sandbox_execute", {"name": "list_dir", "input": {}}))
    for result in held:
        assert "write needs a person's approval" in error_text(result)
        assert action_of(result)["toolName"] == "write"
    assert read["ok"] and not (workspace / "w.txt").exists() and not (workspace / "made").exists()


@pytest.mark.parametrize("mode", ERAS)
async def test_an_approved_route_runs_and_the_question_names_the_action(workspace: Path, mode: str) -> None:
    seen: list[str] = []
    config = ServeConfig.build(workspace=workspace, data_dir=None, ask=("write",))
    async with served(config, mode, elicitation_callback=approving(seen)) as client:
        wrote = data(await client.call_tool("sandbox_execute", WRITE))
        appended = data(await client.call_tool("sandbox_execute", APPEND))
        events = data(await client.call_tool("session_get_events", {"limit": 100}))["events"]
    assert wrote["ok"] and appended["output"]["bytes"] == 14 and (workspace / "w.txt").read_text() == "written" * 2
    assert seen[0].startswith("Allow write (Write a file)") and '"content": "written"' in seen[0]
    assert seen[1].startswith("Allow write") and '"sandboxAction": "append_text"' in seen[1]
    started = [e["payload"].get("toolName") for e in events if e["type"] == "span.started"]
    # The routed tool's own events, one span per sandbox_execute span (two per action with an input-required round).
    assert started.count("write") == started.count("sandbox_execute") >= 2


async def test_an_approval_of_one_action_is_not_one_of_another(workspace: Path) -> None:
    """append_text and write_text take the same fields: the action named in the arguments keeps them apart."""
    config = ServeConfig.build(workspace=workspace, data_dir=None, ask=("write",))
    async with served(config) as client:
        held = await client.call_tool("sandbox_execute", APPEND)
        assert (await cli(config, "approve", action_of(held)["requestId"])).returncode == 0
        other = await client.call_tool("sandbox_execute", WRITE)
        direct = await client.call_tool("write", TEXT)
        appended = data(await client.call_tool("sandbox_execute", APPEND))
    assert "needs a person's approval" in error_text(other) and "needs a person's approval" in error_text(direct)
    assert appended["ok"] and (workspace / "w.txt").read_text() == "written"


async def test_a_config_policy_applies_to_the_route(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.json").write_text(json.dumps({"policy": {"write": "always_ask", "bash": "always_ask"}}))
    async with served(ServeConfig.build(workspace=workspace, data_dir=data_dir)) as client:
        wrote = await client.call_tool("sandbox_execute", WRITE)
        ran = await client.call_tool("sandbox_execute", {"name": "run_command", "input": {"command": "pwd"}})
    assert action_of(wrote)["toolName"] == "write" and action_of(ran)["toolName"] == "bash"
    assert not (workspace / "w.txt").exists()


async def test_excluded_tools_are_refused_through_the_route(workspace: Path) -> None:
    selection = Selecting(exclude_tools=("write", "edit", "bash"))
    (workspace / "e.txt").write_text("old")
    calls = [
        *WRITING,
        {"name": "replace_text", "input": {"path": "e.txt", "oldText": "old", "newText": "new"}},
        {"name": "run_command", "input": {"command": "pwd"}},
    ]
    async with served(ServeConfig.build(workspace=workspace, data_dir=None, selection=selection)) as client:
        refused = [error_text(await client.call_tool("sandbox_execute", call)) for call in calls]
        read = data(await client.call_tool("sandbox_execute", {"name": "read_text", "input": {"path": "e.txt"}}))
    tools = ["write", "write", "write", "edit", "bash"]
    for call, tool, text in zip(calls, tools, refused, strict=True):
        action = call["name"]
        assert f"{action} runs as {tool}, which this server does not serve" in text, text
    assert read["output"]["content"].startswith("old") and (workspace / "e.txt").read_text() == "old"
    assert not (workspace / "w.txt").exists() and not (workspace / "made").exists()


async def test_the_sandbox_toolset_alone_serves_no_file_or_shell_action(workspace: Path) -> None:
    selection = Selecting(toolsets=("sandbox",))
    (workspace / "r.txt").write_text("private")
    async with served(ServeConfig.build(workspace=workspace, data_dir=None, selection=selection)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        described = data(await client.call_tool("sandbox_execute", {"name": "inspect", "input": {}}))
        read = await client.call_tool("sandbox_execute", {"name": "read_text", "input": {"path": "r.txt"}})
        listed = await client.call_tool("sandbox_execute", {"name": "list_dir", "input": {}})
    assert names == {"sandbox_describe", "sandbox_execute"}
    assert described["ok"] and {a["routedTo"] for a in described["output"]["actions"]} >= {"read", "write", "bash"}
    assert "read_text runs as read, which this server does not serve" in error_text(read)
    assert "list_dir runs as glob, which this server does not serve" in error_text(listed)
    assert "private" not in str(read) + str(listed)


@pytest.mark.parametrize("mode", ERAS)
async def test_run_shell_through_the_route_asks_as_shell_run(workspace: Path, mode: str) -> None:
    seen: list[str] = []
    command = {"name": "run_shell", "input": {"command": "echo routed > routed.txt"}}
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    async with served(config, mode) as client:
        held = await client.call_tool("sandbox_execute", command)
    async with served(config, mode, elicitation_callback=approving(seen)) as client:
        ran = data(await client.call_tool("sandbox_execute", command))
    assert action_of(held)["toolName"] == "shell_run" and "shell_run needs a person's approval" in error_text(held)
    assert ran["output"]["ok"] and (workspace / "routed.txt").read_text() == "routed\n"
    assert "echo routed > routed.txt" in seen[0]
