"""What memory_search reads besides the index: the recent sessions' checkpoint summaries, in one statement."""

from __future__ import annotations

import pytest

from managed_tools.stores import events, sessions
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


async def test_recent_summaries_are_those_of_the_latest_sessions_that_have_one(runtime: Runtime) -> None:
    """The `limit` most recently active sessions are taken first, then those without a summary left out (a session
    further back never fills a place), each with its newest summary, most recent first; never another owner's."""
    async with runtime.db.write() as tx:
        made = [await sessions.create_session(tx, "default") for _ in range(4)]
        theirs = await sessions.create_session(tx, "default", owner="someone")
        for record in (made[0], made[1], made[3], theirs):
            await events.append_event(tx, record.id, None, "user.message", {}, summary=f"old {record.id}")
            await events.append_event(tx, record.id, None, "user.message", {}, summary=f"new {record.id}")
        await events.append_event(tx, made[3].id, None, "user.message", {})  # no summary: the newest with one counts
        for i, record in enumerate(made):
            await tx.execute(
                "UPDATE sessions SET last_activity_at = ? WHERE id = ?", (f"2026-01-0{i + 1}T00:00:00.000Z", record.id)
            )
    async with runtime.db.read() as tx:
        recent = await sessions.recent_summaries(tx, "default", owner="", limit=3)
    assert [(sid, summary) for sid, _, _, summary in recent] == [
        (made[3].id, f"new {made[3].id}"),
        (made[1].id, f"new {made[1].id}"),
    ]  # made[2] has none, made[0] is fourth
    assert all(status == "idle" for _, status, _, _ in recent)
