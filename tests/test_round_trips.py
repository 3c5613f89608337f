"""One database round trip per call: a call that only reads, and a refusal, reach the database thread once (its
two span events, written together); a writing call twice (its start on record before it runs, then the commit of
its transaction with its completion). Reads run on the loop's own connections, and the session is touched once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import pytest
from conftest import Connect

from managed_tools.stores.db.sqlite import SqliteDatabase
from managed_tools.tools.framework.context import Runtime

pytestmark = pytest.mark.anyio
T = TypeVar("T")


async def test_a_read_or_a_refusal_is_one_round_trip_and_a_write_two(runtime: Runtime, connect: Connect) -> None:
    db = runtime.db
    assert isinstance(db, SqliteDatabase)
    hops: list[object] = []
    on_thread = db._on_thread

    async def counted(step: Callable[[], T]) -> T:
        hops.append(step)
        return await on_thread(step)

    db._on_thread = counted  # type: ignore[method-assign]
    calls: list[tuple[str, dict[str, Any], int]] = [
        ("memory_write", {"target": "session_state", "content": "first"}, 2),
        ("memory_read", {"target": "session_state"}, 1),
        ("session_get_events", {"limit": 5}, 1),
        ("no_such_tool", {}, 1),  # refused before parsing
        ("memory_read", {"target": "nowhere"}, 1),  # bad arguments
        ("memory_write", {"target": "session_state", "content": "second"}, 2),
    ]
    async with connect(runtime) as client:
        for name, arguments, most in calls:
            await anyio.sleep(0.05)  # change notices go out off the call's path; let them go first
            hops.clear()
            await client.call_tool(name, arguments)
            assert len(hops) <= most, (name, len(hops))


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
