"""The session artifacts as MCP resources (outcome history, permission posture, shell history and last output, the
staging manifest, the agent setup): listed, readable, same agent only, and notified when they change, both eras."""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, Connect, data
from mcp import Client, MCPError

from managed_tools.stores import sessions
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]
VIEWS = {
    "outcome_history": "outcome/history",
    "permission_posture": "permissions/posture",
    "shell_history": "shell/history",
    "shell_last_output": "shell/last-output",
    "staging_manifest": "staging/manifest",
    "agent_setup": "agent/setup",
}


def uri(session_id: str, view: str) -> str:
    return f"managed-tools://sessions/{session_id}/{VIEWS[view]}"


async def read_json(client: Client, target: str) -> dict[str, Any]:
    content = (await client.read_resource(target)).contents[0]
    assert isinstance(content, types.TextResourceContents) and content.mime_type == "application/json"
    parsed: dict[str, Any] = json.loads(content.text)
    return parsed


@pytest.mark.parametrize("mode", ERAS)
async def test_listed_readable_and_same_agent_only(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with runtime.db.write() as tx:
        stranger = await sessions.create_session(tx, "beta")
    async with connect(runtime, mode) as client:
        data(await client.call_tool("bash", {"command": "pwd"}))
        first = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
    async with connect(runtime, mode) as client:
        current = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        listed = {r.name: r.uri for r in (await client.list_resources()).resources}
        mine = {view: await read_json(client, uri(current, view)) for view in VIEWS}
        theirs = await read_json(client, uri(first, "shell_history"))
        their_setup = await read_json(client, uri(first, "agent_setup"))
        for view in VIEWS:
            with pytest.raises(MCPError, match="is not available to agent default"):
                await client.read_resource(uri(stranger.id, view))
    assert {view: listed[view] for view in VIEWS} == {view: uri(current, view) for view in VIEWS}
    assert mine["outcome_history"]["sessionId"] == current and mine["outcome_history"]["count"] == 0
    assert mine["permission_posture"]["sessionId"] == current
    assert "shell_run" in {t["name"] for t in mine["permission_posture"]["alwaysAskTools"]}
    assert mine["shell_history"]["count"] == 0 and mine["shell_last_output"]["lastCommand"] is None
    assert mine["staging_manifest"] == {"sessionId": current, "count": 0, "drafts": []}
    assert mine["agent_setup"]["available"] and mine["agent_setup"]["sessionId"] == current
    assert theirs["sessionId"] == first and [c["command"] for c in theirs["commands"]] == ["pwd"]
    assert their_setup["fingerprint"] == mine["agent_setup"]["fingerprint"]


class Seen:
    """The resource URIs notified so far, and a way to wait for one."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self._changed = anyio.Event()

    def add(self, notified: str) -> None:
        self.uris.append(notified)
        self._changed.set()
        self._changed = anyio.Event()

    async def expect(self, *wanted: str) -> None:
        with anyio.fail_after(5):
            while not set(wanted) <= set(self.uris):
                await self._changed.wait()


Step = Callable[[Client, Seen, str], Awaitable[None]]


async def _changes(client: Client, seen: Seen, sid: str, runtime: Runtime) -> None:
    """Each artifact changes, and its notification arrives; a read-only call notifies nothing."""
    data(await client.call_tool("session_get_snapshot", {}))
    await anyio.sleep(0.2)
    assert seen.uris == []
    data(await client.call_tool("outcome_define", {"title": "Ship it", "successCriteria": ["tests pass"]}))
    await seen.expect(uri(sid, "outcome_history"), uri(sid, "permission_posture"))
    assert (await read_json(client, uri(sid, "outcome_history")))["activeOutcome"]["title"] == "Ship it"
    seen.uris.clear()
    data(await client.call_tool("bash", {"command": "pwd"}))
    await seen.expect(uri(sid, "shell_history"), uri(sid, "shell_last_output"))
    assert (await read_json(client, uri(sid, "shell_last_output")))["lastCommand"]["command"] == "pwd"
    seen.uris.clear()
    substrate = next(m.root for m in runtime.guard.mounts if m.kind == "agent_substrate")
    (substrate / "SOUL.md").write_text("be kind\n")
    data(await client.call_tool("resources_stage_from_substrate", {"sourcePath": "SOUL.md"}))
    await seen.expect(uri(sid, "staging_manifest"))
    assert (await read_json(client, uri(sid, "staging_manifest")))["count"] == 1
    assert uri(sid, "outcome_history") not in seen.uris and uri(sid, "agent_setup") not in seen.uris


@asynccontextmanager
async def _legacy(runtime: Runtime, connect: Connect) -> AsyncIterator[tuple[Client, Seen, str]]:
    seen = Seen()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            seen.add(message.params.uri)

    async with connect(runtime, "legacy", message_handler=on_message) as client:
        sid = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated for 2026-07-28
            for view in VIEWS:
                await client.subscribe_resource(uri(sid, view))
        yield client, seen, sid


async def test_handshake_era_notifications(runtime: Runtime, connect: Connect) -> None:
    async with _legacy(runtime, connect) as (client, seen, sid):
        await _changes(client, seen, sid, runtime)
        seen.uris.clear()
        # A client without elicitation: the call fails closed and its request stays open for a person.
        blocked = await client.call_tool("shell_run", {"command": "true"})
        await seen.expect(uri(sid, "permission_posture"))
        posture = await read_json(client, uri(sid, "permission_posture"))
    assert blocked.is_error
    assert [r["toolName"] for r in posture["openRequests"]] == ["shell_run"]


async def test_modern_era_notifications(runtime: Runtime, connect: Connect) -> None:
    seen = Seen()
    async with connect(runtime) as client:
        sid = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        wanted = [uri(sid, view) for view in VIEWS]
        async with client.listen(resource_subscriptions=wanted) as subscription, anyio.create_task_group() as group:

            async def collect() -> None:
                async for event in subscription:
                    notified = getattr(event, "uri", None)
                    if notified is not None:
                        seen.add(notified)

            group.start_soon(collect)
            await _changes(client, seen, sid, runtime)
            group.cancel_scope.cancel()
