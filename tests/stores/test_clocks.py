"""Clocks that disagree (issue 39 F5, F6), made for real: a second server process under faketime shares the state
of one in process. Retention never compacts an open wake and never ages the state by a clock that runs ahead of
it; memory versions list in the order they were committed, whatever their processes' clocks said."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

import pytest
from conftest import Connect, data
from mcp import Client, StdioServerParameters

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.both_backends,
    pytest.mark.skipif(shutil.which("faketime") is None and not os.environ.get("CI"), reason="needs faketime"),
]


@asynccontextmanager
async def skewed_server(config: ServeConfig, offset: str, *extra: str) -> AsyncIterator[Client]:
    """A second `managed-tools serve` over stdio on the same state, its clock `offset` (faketime) from ours; the
    monotonic clock stays true, so only the wall clock disagrees."""
    where = ["--data-dir", str(config.data_dir)] + (["--database", config.database] if config.database else [])
    env = {**os.environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    serve = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(config.workspace)]
    params = StdioServerParameters(command="faketime", args=["-f", offset, *serve, *where, *extra], env=env)
    async with Client(params) as client:
        yield client


async def tool_spans(runtime: Runtime, wake: str) -> int:
    async with runtime.db.read() as tx:
        return int(
            await tx.scalar(
                "SELECT count(*) FROM events WHERE wake_id = ? AND type IN ('span.started', 'span.completed') "
                'AND payload LIKE \'%"spanKind":"tool"%\'',
                (wake,),
            )
        )


async def wake_of(client: Client) -> tuple[str, str]:
    snapshot = data(await client.call_tool("session_get_snapshot", {}))
    return str(snapshot["sessionId"]), str(snapshot["lastWakeId"])


async def test_a_server_60_days_ahead_leaves_the_other_servers_wakes(
    runtime: Runtime, config: ServeConfig, connect: Connect
) -> None:
    async with connect(runtime) as client:  # an ended wake: old by the skewed clock, not by the state's
        session, ended = await wake_of(client)
        for _ in range(4):
            await client.call_tool("memory_read", {"target": "session_state"})
    async with connect(runtime, session_id=session) as live:
        _, open_wake = await wake_of(live)
        for _ in range(40):
            await live.call_tool("memory_read", {"target": "session_state"})
        before = {ended: await tool_spans(runtime, ended), open_wake: await tool_spans(runtime, open_wake)}
        assert before[open_wake] >= 80
        (config.data_dir / "config.json").write_text(json.dumps({"retention": {"eventsMaxAgeDays": 30}}))
        async with skewed_server(config, "+60d") as ahead:  # retention runs at its start
            skewed, _ = await wake_of(ahead)
            await ahead.call_tool("memory_read", {"target": "session_state"})
        await live.call_tool("memory_read", {"target": "session_state"})  # the live wake still serves
        after = {ended: await tool_spans(runtime, ended), open_wake: await tool_spans(runtime, open_wake)}
    assert after[ended] == before[ended]
    assert after[open_wake] == before[open_wake] + 2
    async with runtime.db.read() as tx:
        assert await tx.scalar("SELECT count(*) FROM events WHERE type = 'trace.compacted'") == 0
        first = "SELECT min(created_at) FROM events WHERE session_id = ?"
        ours, theirs = [datetime.fromisoformat(str(await tx.scalar(first, (s,)))) for s in (session, skewed)]
    assert theirs - ours > timedelta(days=59)  # its clock was ahead indeed


async def test_versions_list_in_commit_order_when_a_clock_steps_back(
    runtime: Runtime, config: ServeConfig, connect: Connect
) -> None:
    def note(n: int) -> dict[str, str]:
        return {"target": "session_state", "content": f"note {n}"}

    async with connect(runtime) as client:
        session, _ = await wake_of(client)
        first = data(await client.call_tool("memory_write", note(1)))["versionId"]
    async with skewed_server(config, "-1d", "--session", session) as behind:
        second = data(await behind.call_tool("memory_write", note(2)))["versionId"]
    async with connect(runtime, session_id=session) as client:
        third = data(await client.call_tool("memory_write", note(3)))["versionId"]
        listed = data(await client.call_tool("memory_list_versions", {"target": "session_state"}))["versions"]
        current = data(await client.call_tool("memory_read", {"target": "session_state"}))
    assert [v["versionId"] for v in listed] == [third, second, first]
    stamps = {v["versionId"]: v["createdAt"] for v in listed}
    assert stamps[second] < stamps[first] < stamps[third]  # the middle one's clock said a day earlier
    assert current["versionId"] == third and "note 3" in current["content"]
