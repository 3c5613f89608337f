"""A long session made fast: EVENTS tool span events in WAKES ended wakes, by SQL in one statement, then kept
summaries made from them as retention makes them (tests/stores/test_session_length.py, bench/session_length.py)."""

from __future__ import annotations

import json

from managed_tools.stores import event_search, events
from managed_tools.tools.framework.context.context import Runtime

EVENTS = 100_000
WAKES = 100


async def bulk_history(runtime: Runtime, session_id: str, count: int = EVENTS) -> None:
    """`count` tool span events of `memory_read` in WAKES ended wakes of the session, their wakes' kept summaries
    (events.recount_traces), the session's counts and successful tools, and the event index brought up to date."""
    wakes = [f"bulk-{session_id}-{n}" for n in range(WAKES)]
    per_wake = count // WAKES
    payload = json.dumps({"spanKind": "tool", "toolName": "memory_read", "result": "success"})
    async with runtime.db.write() as tx:
        for wake in wakes:
            await tx.execute(
                "INSERT INTO wakes (id, session_id, started_at, ended_at, transport, pid, setup_fingerprint) "
                "VALUES (?, ?, '2026-01-01T00:00:00.000Z', '2026-01-01T01:00:00.000Z', 'bulk', 1, 'bulk')",
                (wake, session_id),
            )
        series = (
            "WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c WHERE n < ? - 1) SELECT n FROM c"
            if tx.dialect.name == "sqlite"
            else "SELECT generate_series(0, ? - 1) AS n"
        )
        await tx.execute(
            "INSERT INTO events (id, session_id, wake_id, type, created_at, processed, summary, payload) "
            f"SELECT 'bulk-' || ? || '-' || n, ?, 'bulk-' || ? || '-' || CAST(n / ? AS TEXT), "
            "CASE WHEN n % 2 = 0 THEN 'span.started' ELSE 'span.completed' END, '2026-01-01T00:30:00.000Z', 1, "
            f"CASE WHEN n % 2 = 1 THEN 'memory_read: success' END, ? FROM ({series}) AS s",
            (session_id, session_id, session_id, per_wake, payload, count),
        )
        if hasattr(events, "recount_traces"):  # what migration 27 keeps (bench/ runs this on main's code too)
            await events.recount_traces(tx, wakes)
            await tx.execute(
                "INSERT INTO session_tools (session_id, tool) VALUES (?, 'memory_read') ON CONFLICT DO NOTHING",
                (session_id,),
            )
            await tx.execute(
                "UPDATE session_event_counts SET events = events + ?, tool_calls = tool_calls + ? WHERE session_id = ?",
                (count, count // 2, session_id),
            )
        if tx.dialect.name == "sqlite":
            await event_search.index_pending(tx, int(await tx.scalar("SELECT max(seq) FROM events")), at_least=1)
        stored = await tx.scalar("SELECT count(*) FROM events WHERE session_id = ?", (session_id,))
    assert int(stored) >= count
