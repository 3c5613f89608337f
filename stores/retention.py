"""Retention of tool spans (config.json `retention`): old wakes compacted into their trace summary.

A wake is old when its last event is older than `max_age_days`, or when it lies wholly behind the newest
`max_per_session` span events of its session. Compacting it deletes its `span.started` / `span.completed` events
(and their entries in the event index) and appends one `trace.compacted` event that keeps the trace's summary: how
many calls, their results, the tools called most, when it began and ended, its last summary. Every other event
(permission decisions, outcomes, interrupts, wake spans) stays. SQLite reuses the freed pages, so the file stops
growing once the policy holds (docs/retention.md has the figures).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import anyio

from managed_tools.stores import events
from managed_tools.stores.db import Database, Tx
from managed_tools.stores.errors import DatabaseUnwritableError, StoreError

log = logging.getLogger("managed_tools.retention")
COMPACTED = "trace.compacted"
WAKES_PER_BATCH = 20
TOP_TOOLS = 10
EVERY_SECONDS = 600  # while running: a pass every ten minutes (config.json `retention.everySeconds`)
PASS_SECONDS = 0.5  # and at most this long each (a batch of WAKES_PER_BATCH wakes per write transaction)


def _tool_spans(tx: Tx) -> str:
    """Tool calls' span events (a wake's own span stays: it says when the wake began and ended)."""
    return f"type IN ('span.started', 'span.completed') AND {tx.dialect.json_text('payload', 'spanKind')} = 'tool'"


@dataclass(frozen=True)
class Retention:
    max_age_days: int | None = None
    max_per_session: int | None = None
    every_seconds: float = EVERY_SECONDS

    @property
    def active(self) -> bool:
        return self.max_age_days is not None or self.max_per_session is not None


async def apply(db: Database, policy: Retention, *, now: datetime | None = None, seconds: float = 2.0) -> int:
    """Compact the old wakes, a batch per write transaction (so no call waits long for the lock), for at most
    about `seconds` (the rest at the next pass); returns how many events went. A refused write (a full disk,
    another process's lock) stops it with a line in the log: the next pass carries on."""
    if not policy.active:
        return 0
    deadline = time.monotonic() + seconds
    removed = 0
    try:
        while time.monotonic() < deadline:
            async with db.write() as tx:
                wakes = await old_wakes(tx, policy, await state_time(tx, now or datetime.now(UTC)))
                for wake in wakes:
                    removed += await compact_wake(tx, wake)
            if not wakes:
                break
    except DatabaseUnwritableError as exc:
        log.warning("old tool spans were not all compacted this time: %s", exc)
    return removed


@asynccontextmanager
async def applied_while_running(db: Database, policy: Retention) -> AsyncIterator[None]:
    """The policy applied again every `policy.every_seconds` for as long as the block runs."""
    async with anyio.create_task_group() as background:
        background.start_soon(keep_applying, db, policy)
        yield
        background.cancel_scope.cancel()


async def keep_applying(db: Database, policy: Retention) -> None:
    """Apply the policy every `policy.every_seconds` while the server runs, a bounded pass each time (issue 39 F14: a
    server that runs for days applied it only at its start). Runs until cancelled."""
    if not policy.active:
        return
    while True:
        await anyio.sleep(policy.every_seconds)
        try:
            await apply(db, policy, seconds=PASS_SECONDS)
        except StoreError as exc:  # a damaged or vanished state: the calls report it; this pass waits for the next
            log.warning("retention skipped a pass: %s", exc)


async def state_time(tx: Tx, wall: datetime) -> str:
    """The time retention measures age from: this process's clock, but never past the newest event the state holds
    (issue 39 F5). A server whose clock runs days ahead then cannot age another server's wakes by its own clock."""
    newest = await tx.scalar("SELECT created_at FROM events ORDER BY seq DESC LIMIT 1")
    mine = iso(wall)
    return mine if newest is None else min(mine, str(newest))


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


async def old_wakes(tx: Tx, policy: Retention, now: str, limit: int = WAKES_PER_BATCH) -> list[str]:
    """Up to `limit` ended wakes whose tool spans the policy no longer keeps, chosen from the wakes' kept summaries
    (wake_traces), never the events. A wake still open is never one of them: its server may be serving it."""
    found: list[str] = []
    ended = "t.tool_events > 0 AND EXISTS (SELECT 1 FROM wakes w WHERE w.id = t.wake_id AND w.ended_at IS NOT NULL)"
    if policy.max_age_days is not None:
        cutoff = iso(datetime.fromisoformat(now) - timedelta(days=policy.max_age_days))
        rows = await tx.fetchall(
            f"SELECT t.wake_id FROM wake_traces t WHERE t.updated_at < ? AND {ended} ORDER BY t.updated_at LIMIT ?",
            (cutoff, limit),
        )
        found += [str(r[0]) for r in rows]
    if policy.max_per_session is not None and len(found) < limit:
        crowded = await tx.fetchall(
            "SELECT session_id FROM wake_traces WHERE tool_events > 0 GROUP BY session_id HAVING sum(tool_events) > ?",
            (policy.max_per_session,),
        )
        for row in crowded:
            edge = await tx.scalar(
                f"SELECT seq FROM events WHERE session_id = ? AND {_tool_spans(tx)} ORDER BY seq DESC LIMIT 1 OFFSET ?",
                (row[0], policy.max_per_session - 1),
            )
            behind = await tx.fetchall(
                f"SELECT t.wake_id FROM wake_traces t WHERE t.session_id = ? AND t.last_seq < ? AND {ended} "
                "ORDER BY t.last_seq LIMIT ?",
                (row[0], edge, limit - len(found)),
            )
            found += [str(r[0]) for r in behind if str(r[0]) not in found]
            if len(found) >= limit:
                break
    return found[:limit]


async def compact_wake(tx: Tx, wake_id: str) -> int:
    """Replace the wake's span events by one `trace.compacted` event; returns how many events went."""
    rows = await tx.fetchall(
        "SELECT seq, session_id, type, created_at, summary, payload FROM events "
        f"WHERE wake_id = ? AND {_tool_spans(tx)} ORDER BY seq",
        (wake_id,),
    )
    if not rows:
        return 0
    results: Counter[str] = Counter()
    tools: Counter[str] = Counter()
    latest = None
    for row in rows:
        if row["type"] == "span.completed":
            payload = json.loads(row["payload"])
            results[str(payload.get("result"))] += 1
            tools[str(payload.get("toolName"))] += 1
            latest = row["summary"] or latest
    seqs = [int(r["seq"]) for r in rows]
    await _unindex(tx, seqs)
    for start in range(0, len(seqs), 500):
        chunk = seqs[start : start + 500]
        await tx.execute(f"DELETE FROM events WHERE seq IN ({','.join('?' * len(chunk))})", chunk)
    calls = sum(results.values())
    await events.append_event(
        tx,
        rows[0]["session_id"],
        wake_id,
        COMPACTED,
        {
            "eventCount": len(rows),
            "calls": calls,
            "results": dict(results),
            "tools": dict(tools.most_common(TOP_TOOLS)),
            "startedAt": rows[0]["created_at"],
            "endedAt": rows[-1]["created_at"],
            "latestSummary": latest,
        },
        summary=f"{calls} tool call(s) compacted ({', '.join(f'{n} {r}' for r, n in sorted(results.items()))})",
        created_at=rows[-1]["created_at"],
        touch=False,
    )
    await events.forget_events(tx, rows[0]["session_id"], len(rows))
    await events.recount_traces(tx, [wake_id])
    return len(rows)


async def _unindex(tx: Tx, seqs: list[int]) -> None:
    """The events' entries in the event index, before the events go (FTS5's external content needs their text)."""
    for start in range(0, len(seqs), 500):
        chunk = seqs[start : start + 500]
        marks = ",".join("?" * len(chunk))
        if tx.dialect.name == "postgresql":
            await tx.execute(f"DELETE FROM event_search WHERE seq IN ({marks})", chunk)
            continue
        await tx.execute(
            "INSERT INTO events_fts(events_fts, rowid, agent, session, type, body) "
            f"SELECT 'delete', seq, agent, session, type, body FROM event_search_docs WHERE seq IN ({marks}) "
            "AND seq <= (SELECT seq FROM events_fts_mark)",
            chunk,
        )
