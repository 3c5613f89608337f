"""tools/list is built once per registry version, principal view and protocol version (server/publishing/listing.py),
and the SDK's checks before a handler still refuse what they refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import Connect
from mcp import Client
from mcp.client import advertise
from mcp.server import Server
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from mcp.shared.message import SessionMessage

from managed_tools.server.auth.principal import LOCAL, TOOLS_READ, TOOLS_WRITE, Principal
from managed_tools.server.mcp.app import PublishedTools, build_server
from managed_tools.server.mcp.approval_card import CARD_TOOL
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio
ERAS = ["auto", "legacy"]
APPS = advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})


@pytest.fixture
def handler_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry each time the tools/list handler builds its answer."""
    runs: list[str] = []
    original = PublishedTools.listed

    def counted(self: PublishedTools, principal: Principal) -> list[types.Tool]:
        runs.append(principal.view)
        return original(self, principal)

    monkeypatch.setattr(PublishedTools, "listed", counted)
    return runs


@pytest.mark.parametrize("mode", ERAS)
async def test_later_listings_are_the_first_answer_again(
    runtime: Runtime, connect: Connect, mode: str, handler_runs: list[str]
) -> None:
    server = build_server(runtime, transport="memory")
    async with connect(runtime, mode=mode) as other:
        first = await other.list_tools()
    answers = []
    async with _client_of(server, mode) as one, _client_of(server, mode) as two:
        for client in (one, two, one):
            answers.append(await client.list_tools(cache_mode="refresh"))
    assert handler_runs == ["all", "all"]  # the other server's, then this one's first
    assert all(answer.tools == first.tools for answer in answers)
    assert len(first.tools) == len(runtime.registry)


@pytest.mark.parametrize("mode", ERAS)
async def test_an_apps_host_and_a_plain_client_keep_their_own_listings(runtime: Runtime, mode: str) -> None:
    """The approval card's tool is listed only to a client that negotiated MCP Apps: one server, both orders."""
    server = build_server(runtime, transport="memory")
    listings = []
    for extensions in ([], [APPS], []):
        async with Client(server, mode=mode, extensions=extensions) as client:
            listings.append({tool.name for tool in (await client.list_tools()).tools})
    plain, host, plain_again = listings
    assert CARD_TOOL not in plain and plain == plain_again and host == plain | {CARD_TOOL}


async def test_a_changed_registry_is_listed_anew(runtime: Runtime, connect: Connect, handler_runs: list[str]) -> None:
    base = next(iter(runtime.registry))
    async with connect(runtime) as client:
        before = {tool.name for tool in (await client.list_tools(cache_mode="refresh")).tools}
        runtime.registry.replace_group("up", [base.model_copy(update={"name": "up__describe", "ownership": "mcp"})])
        after = {tool.name for tool in (await client.list_tools(cache_mode="refresh")).tools}
        again = {tool.name for tool in (await client.list_tools(cache_mode="refresh")).tools}
    assert after == again == before | {"up__describe"}
    assert len(handler_runs) == 2


async def test_a_client_that_listed_often_hears_of_a_change_once(runtime: Runtime, connect: Connect) -> None:
    """The regression: each listing kept its own session object, so a client that listed three times heard of
    one change three times (and every listing stayed in memory)."""
    heard: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.append(message.method)

    base = next(iter(runtime.registry))
    async with connect(runtime, "legacy", message_handler=on_message) as client:
        for _ in range(3):
            await client.list_tools(cache_mode="refresh")
        runtime.registry.replace_group("up", [base.model_copy(update={"name": "up__describe", "ownership": "mcp"})])
        with anyio.fail_after(5):
            while not heard:  # noqa: ASYNC110 (the watcher's notification arrives on the client's own task)
                await anyio.sleep(0.02)
        await anyio.sleep(0.3)  # room for any duplicate to arrive
    assert heard == ["notifications/tools/list_changed"]


async def test_principals_of_one_view_share_a_listing() -> None:
    read, write = frozenset({TOOLS_READ}), frozenset({TOOLS_READ, TOOLS_WRITE})
    assert LOCAL.view == Principal("oauth:a", write).view == "all"
    assert Principal("oauth:a", read).view == Principal("oauth:b", read | {"approvals"}).view == "read_only"
    assert Principal("oauth:c", frozenset({"approvals"})).view == "none"


async def test_a_kept_listing_still_refuses_what_the_sdk_refuses(runtime: Runtime) -> None:
    """Once an answer is kept, a listing with malformed params, or before the handshake, is still an error."""
    server = build_server(runtime, transport="memory")
    async with _raw(server) as send:
        initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": ""}}
        await send("initialize", initialize)
        await send("notifications/initialized", None)
        first, second = await send("tools/list", {}), await send("tools/list", None)
        assert first == second | {"id": first["id"]} and len(first["result"]["tools"]) == len(runtime.registry)
        assert (await send("tools/list", {"cursor": 5}))["error"]["code"] == types.INVALID_PARAMS
    async with _raw(server) as send:  # a new connection, never initialized
        refused = await send("tools/list", {})
    assert refused["error"]["code"] == types.INVALID_PARAMS


@asynccontextmanager
async def _client_of(server: Server[Any], mode: str) -> AsyncIterator[Client]:
    async with Client(server, mode=mode) as client:
        yield client


@asynccontextmanager
async def _raw(server: Server[Any]) -> AsyncIterator[Any]:
    """Send JSON-RPC frames to `server` as a client would, bypassing every client-side check."""
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](10)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](10)
    ids = iter(range(1, 1000))

    async def send(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            frame["params"] = params
        if method.startswith("notifications/"):
            await to_server.send(SessionMessage(types.JSONRPCNotification.model_validate(frame)))
            return {}
        frame["id"] = next(ids)
        await to_server.send(SessionMessage(types.JSONRPCRequest.model_validate(frame)))
        with anyio.fail_after(10):
            reply = await from_server.receive()
        answer: dict[str, Any] = reply.message.model_dump(by_alias=True, exclude_none=True)
        return answer

    async with anyio.create_task_group() as group:
        group.start_soon(server.run, server_reads, server_writes, server.create_initialization_options())
        try:
            yield send
        finally:
            to_server.close()
            group.cancel_scope.cancel()
