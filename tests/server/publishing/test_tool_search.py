"""The search profile (`serve --tool-search`, issue 29 part 1): a small core at connect, every served tool one
search away, and a found tool run under its own name, policy, approval, scopes and events, through a real client in
both protocol eras. Nothing hidden (by the toolset selection or the caller's scopes) is ever listed, described or
run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, data, error_text
from mcp import Client
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from support.snapshot_tools import full_catalogue
from support.tool_search_phrasings import PHRASINGS

from managed_tools.server.config.serve_config import Selecting, ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.publishing.tool_search import FALLBACK_CORE
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.discovery.index import ToolIndex
from managed_tools.tools.discovery.tools import OWN
from managed_tools.tools.framework.definitions.definition import model_visible_chars

pytestmark = pytest.mark.anyio

MAX_AT_CONNECT = 6_000  # names + descriptions + input schemas listed at connect
LESSON = {"kind": "lesson", "title": "t", "detail": "d"}


def visible(tools: list[types.Tool]) -> int:
    """What tests/tools/test_catalogue_budget.py counts, from what a client received."""
    return sum(
        len(t.name) + len(t.description or "") + len(json.dumps(t.input_schema, separators=(",", ":"))) for t in tools
    )


class Heard:
    """A message_handler keeping the tools/list_changed notifications."""

    def __init__(self) -> None:
        self.changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.changed.set()


@asynccontextmanager
async def served(config: ServeConfig, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    async with open_runtime(config.model_copy(update={"tool_search": True})) as runtime:
        server = build_server(runtime, transport="memory", approval_wait_seconds=5)
        async with Client(server, mode=mode, **kwargs) as client:
            yield client


def test_the_right_tool_is_in_the_top_three_for_most_phrasings() -> None:
    index = ToolIndex(full_catalogue())
    missed = [(q, tool) for q, tool in PHRASINGS if tool not in [n for n, _ in index.search(q, 3)]]
    assert len(PHRASINGS) == 40
    assert (len(PHRASINGS) - len(missed)) / len(PHRASINGS) >= 0.95, missed


@pytest.mark.parametrize("mode", ERAS)
async def test_a_small_list_at_connect_and_every_tool_found(workspace: Path, mode: str) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    async with served(config, mode) as client:
        listed = (await client.list_tools()).tools
        names = {t.name for t in listed}
        hits = data(await client.call_tool("tools_search", {"query": "persistent shell run command", "limit": 3}))
        everything = data(await client.call_tool("tools_search", {"query": "shell", "limit": 20}))
        instructions = client.instructions or ""
    assert visible(listed) <= MAX_AT_CONNECT, visible(listed)
    assert set(OWN) <= names and names - set(OWN) == set(FALLBACK_CORE)  # a fresh state: the fixed core
    assert "find them with tools_search" in instructions
    assert "shell_exec" in [h["name"] for h in hits["hits"]]
    assert {h["name"] for h in everything["hits"]} >= {"shell_run", "shell_exec", "shell_open"}


async def test_a_described_tool_is_listed_where_the_client_listens(workspace: Path) -> None:
    """Handshake era: tools_describe adds the tool to this connection's list, says so, and it is called by name."""
    heard = Heard()
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    async with served(config, "legacy", message_handler=heard) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        described = data(await client.call_tool("tools_describe", {"names": ["planning_setup_plan"]}))
        with anyio.fail_after(5):
            await heard.changed.wait()
        after = {t.name for t in (await client.list_tools()).tools}
        plan = data(await client.call_tool("planning_setup_plan", {"objective": "ship", "initialSteps": ["a"]}))
    assert "planning_setup_plan" not in before and after == before | {"planning_setup_plan"}
    assert described["listed"] and described["tools"][0]["inputSchema"]["properties"]["objective"]
    assert plan["plan"]["objective"] == "ship"


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_call_runs_the_tool_under_its_own_name(workspace: Path, mode: str) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    async with served(config, mode) as client:
        described = data(await client.call_tool("tools_describe", {"names": ["learning_record"]}))
        called = data(await client.call_tool("tools_call", {"name": "learning_record", "arguments": LESSON}))
        events = data(await client.call_tool("tools_call", {"name": "session_get_events", "arguments": {"limit": 50}}))
    assert described["listed"] is (mode == "legacy")
    assert called["name"] == "learning_record" and called["output"]
    started = [e["payload"].get("toolName") for e in events["output"]["events"] if e["type"] == "span.started"]
    assert started.count("learning_record") == 1 and "tools_call" in started


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_the_selection_hides_is_never_found_described_or_run(workspace: Path, mode: str) -> None:
    selection = Selecting(preset="coding")  # no shell, no files
    config = ServeConfig.build(workspace=workspace, data_dir=None, selection=selection)
    async with served(config, mode) as client:
        hits = data(await client.call_tool("tools_search", {"query": "run a shell command bash", "limit": 20}))
        described = await client.call_tool("tools_describe", {"names": ["shell_run"]})
        called = await client.call_tool("tools_call", {"name": "bash", "arguments": {"command": "pwd"}})
        direct = await client.call_tool("bash", {"command": "pwd"})
        listed = {t.name for t in (await client.list_tools()).tools}
    assert not {h["name"] for h in hits["hits"]} & {"shell_run", "bash", "shell_exec", "read", "write"}
    assert "No tool named shell_run is served to you" in error_text(described)
    assert "No tool named 'bash' can be called" in error_text(called) and direct.is_error
    assert not listed & {"read", "edit", "glob"}  # the fallback core's file tools are not served here


async def test_tools_call_cannot_bypass_an_approval(workspace: Path) -> None:
    """An always_ask tool called through tools_call waits for a person like a direct call: nothing is written."""
    config = ServeConfig.build(workspace=workspace, data_dir=None, ask=("write",))
    async with served(config, "auto") as client:
        held = await client.call_tool("tools_call", {"name": "write", "arguments": {"path": "x.txt", "content": "x"}})
    assert "write needs a person's approval" in error_text(held)
    assert (held.meta or {})["managed-tools/requiresAction"]["toolName"] == "write"
    assert not (workspace / "x.txt").exists()


async def test_a_read_only_scope_reaches_no_writing_tool(workspace: Path) -> None:
    """An OAuth principal with tools:read finds, sees and runs only read-only tools, through every path."""
    token = AccessToken(token="t", client_id="c", scopes=["tools:read"], subject="someone", claims={"iss": "i"})
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        async with served(config, "auto") as client:
            listed = (await client.list_tools()).tools
            hits = data(await client.call_tool("tools_search", {"query": "write a file memory", "limit": 20}))
            described = await client.call_tool("tools_describe", {"names": ["write"]})
            called = await client.call_tool("tools_call", {"name": "write", "arguments": {"path": "y", "content": "y"}})
    finally:
        auth_context_var.reset(reset)
    assert {t.name for t in listed} & {"memory_write", "edit", "tools_call"} == set()
    assert hits["hits"] and all(h["name"] not in ("write", "memory_write", "edit") for h in hits["hits"])
    assert described.is_error and called.is_error and not (workspace / "y").exists()


@pytest.mark.both_backends
async def test_the_core_is_what_this_state_calls_most(config: ServeConfig) -> None:
    async with served(config, "auto") as client:
        for _ in range(3):
            data(await client.call_tool("tools_call", {"name": "learning_list", "arguments": {}}))
    async with served(config, "auto") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        listed = (await client.list_tools()).tools
    assert "learning_list" in names and visible(listed) <= MAX_AT_CONNECT


def test_the_fallback_core_fits() -> None:
    catalogue = {d.name: d for d in full_catalogue()}
    assert all(name in catalogue for name in FALLBACK_CORE)
    assert sum(model_visible_chars(catalogue[n]) for n in FALLBACK_CORE) > 0


def test_the_coding_preset_searches_unless_told_not_to(workspace: Path, tmp_path: Path) -> None:
    coding = Selecting(preset="coding")
    assert ServeConfig.build(workspace=workspace, data_dir=None, selection=coding).tool_search
    assert not ServeConfig.build(workspace=workspace, data_dir=None, selection=coding, tool_search=False).tool_search
    assert not ServeConfig.build(workspace=workspace, data_dir=None).tool_search  # full: every tool listed
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.json").write_text(json.dumps({"preset": "coding", "toolSearch": False}))
    assert not ServeConfig.build(workspace=workspace, data_dir=data_dir).tool_search


async def test_a_coding_client_connects_to_the_core_and_the_search_tools(workspace: Path) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=None, selection=Selecting(preset="coding"))
    async with open_runtime(config) as runtime, Client(build_server(runtime, transport="memory")) as client:
        listed = (await client.list_tools()).tools
        found = data(await client.call_tool("tools_search", {"query": "make a plan with steps", "limit": 3}))
    assert {t.name for t in listed} == {*OWN, "session_get_snapshot", "memory_read", "memory_write", "outcome_define"}
    assert visible(listed) < 3_300 and found["hits"][0]["name"].startswith("planning_")
