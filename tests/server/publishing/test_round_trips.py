"""Database round trips per call: a call that only reads, and a refusal, never reach the database thread (their two
span events are written together on the loop's thread); a writing call once (the commit of its transaction with its
completion, which syncs the disk; its start is written on the loop's thread). Reads run on the loop's own
connections, and the session is touched once. (A checkpoint every few records adds one, not counted here.)"""

from __future__ import annotations

from typing import Any, TypeVar

import anyio
import pytest
from conftest import Connect, count_hops

from managed_tools.stores.db.sqlite import SqliteDatabase
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio
T = TypeVar("T")


async def test_a_read_or_a_refusal_is_no_round_trip_and_a_write_one(runtime: Runtime, connect: Connect) -> None:
    db = runtime.db
    assert isinstance(db, SqliteDatabase)
    hops = count_hops(runtime)
    calls: list[tuple[str, dict[str, Any], int]] = [
        ("memory_write", {"target": "session_state", "content": "first"}, 1),
        ("memory_read", {"target": "session_state"}, 0),
        ("session_get_events", {"limit": 5}, 0),
        ("no_such_tool", {}, 0),  # refused before parsing
        ("memory_read", {"target": "nowhere"}, 0),  # bad arguments
        ("memory_write", {"target": "session_state", "content": "second"}, 1),
    ]
    db._pages = -1_000_000  # no checkpoint falls due meanwhile
    async with connect(runtime) as client:
        for name, arguments, expected in calls:
            await anyio.sleep(0.05)  # change notices go out off the call's path; let them go first
            hops.clear()
            await client.call_tool(name, arguments)
            assert len(hops) == expected, (name, len(hops))


@pytest.mark.both_backends
async def test_a_read_is_recorded_in_order_and_touches_its_session_once(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await client.call_tool("memory_read", {"target": "session_state"})
        async with runtime.db.read() as tx:
            rows = await tx.fetchall("SELECT type, created_at, session_id, payload FROM events ORDER BY seq")
            activity = await tx.scalar("SELECT last_activity_at FROM sessions WHERE id = ?", (rows[-1]["session_id"],))
    started, completed = rows[-2], rows[-1]
    assert (started["type"], completed["type"]) == ("span.started", "span.completed")
    assert '"toolName":"memory_read"' in started["payload"] and started["created_at"] <= completed["created_at"]
    assert activity == completed["created_at"]
