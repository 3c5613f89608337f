"""Wake requests: a session asks to be woken at a time, for a reason (seed 004's proactive wakes).

Not `stores.sessions`' wakes, which are the connections attached to a session: a wake request is what a scheduler
in a running server acts on when it falls due (server/mcp/wake_scheduler.py). Every transition is one conditional
UPDATE, so when several server processes share the store exactly one of them takes a due request.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel

from managed_tools.stores.db import Row, Tx, as_dict, insert
from managed_tools.stores.errors import AccessDeniedError
from managed_tools.stores.ids import utc_now, uuid7

Priority = Literal["low", "normal", "high"]
WakeStatus = Literal["queued", "running", "due", "offered", "fired", "failed", "cancelled"]
WAITING: tuple[WakeStatus, ...] = ("queued", "due")  # what a session still waits on
DUE: tuple[WakeStatus, ...] = ("due",)
MAX_RESULT_CHARS = 2000
PRIORITY_ORDER = "CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END"


class WakeRequest(BaseModel):
    id: str
    session_id: str
    reason: str
    priority: Priority
    due_at: str
    status: WakeStatus
    requested_in: str | None  # the wake (connection) that asked
    offered_to: str | None  # the wake (connection) a due request was offered to
    result: str | None  # a headless run's answer, or why it failed
    created_at: str
    updated_at: str


def _record(row: Row) -> WakeRequest:
    return WakeRequest(**{key: value for key, value in as_dict(row).items() if key in WakeRequest.model_fields})


async def schedule(
    tx: Tx, session_id: str, *, reason: str, due_at: str, priority: Priority, requested_in: str | None
) -> WakeRequest:
    now = utc_now()
    record = WakeRequest(
        id=uuid7(),
        session_id=session_id,
        reason=reason,
        priority=priority,
        due_at=due_at,
        status="queued",
        requested_in=requested_in,
        offered_to=None,
        result=None,
        created_at=now,
        updated_at=now,
    )
    await insert(tx, "wake_requests", record)
    return record


async def count_queued(tx: Tx, session_id: str) -> int:
    return int(
        await tx.scalar("SELECT COUNT(*) FROM wake_requests WHERE session_id = ? AND status = 'queued'", (session_id,))
    )


async def list_for(
    tx: Tx, session_id: str, *, statuses: Collection[WakeStatus] | None = None, limit: int = 20
) -> list[WakeRequest]:
    """The session's requests, soonest due first (the newest first among those already handled)."""
    sql = "SELECT * FROM wake_requests WHERE session_id = ?"
    params: list[str | int] = [session_id]
    if statuses:
        sql += f" AND status IN ({','.join('?' * len(statuses))})"
        params.extend(statuses)
    sql += " ORDER BY CASE WHEN status IN ('queued','due') THEN 0 ELSE 1 END, "
    sql += f"CASE WHEN status IN ('queued','due') THEN due_at END, updated_at DESC, {PRIORITY_ORDER}, id LIMIT ?"
    params.append(limit)
    return [_record(row) for row in await tx.fetchall(sql, params)]


async def pending_for(tx: Tx, session_id: str, *, limit: int = 20) -> list[WakeRequest]:
    """What the session waits on (queued, or due and waiting for a client), then what was offered to a connection
    still attached to it: the wakes a snapshot shows."""
    rows = await tx.fetchall(
        "SELECT * FROM wake_requests WHERE session_id = ? AND (status IN ('queued','due') OR (status = 'offered' "
        "AND offered_to IN (SELECT id FROM wakes WHERE session_id = ? AND ended_at IS NULL))) "
        f"ORDER BY CASE status WHEN 'offered' THEN 1 ELSE 0 END, due_at, {PRIORITY_ORDER}, id LIMIT ?",
        (session_id, session_id, limit),
    )
    return [_record(row) for row in rows]


async def list_agent(
    tx: Tx, agent_id: str, *, statuses: Collection[WakeStatus], limit: int
) -> list[tuple[WakeRequest, str]]:
    """Every session's requests of the agent in `statuses`, soonest due first, each with the session's owner."""
    marks = ",".join("?" * len(statuses))
    rows = await tx.fetchall(
        f"SELECT w.*, s.owner AS session_owner FROM wake_requests w JOIN sessions s ON s.id = w.session_id "
        f"WHERE s.agent_id = ? AND w.status IN ({marks}) ORDER BY w.due_at, w.id LIMIT ?",
        [agent_id, *statuses, limit],
    )
    return [(_record(row), row["session_owner"]) for row in rows]


async def get_owned(tx: Tx, wake_request_id: str, agent_id: str, *, owner: str) -> WakeRequest:
    """The request, only if its session belongs to `agent_id` and `owner` (the same answer whether it exists or
    not, so another principal's ids are never confirmed)."""
    row = await tx.fetchone(
        "SELECT w.*, s.agent_id AS session_agent, s.owner AS session_owner FROM wake_requests w "
        "JOIN sessions s ON s.id = w.session_id WHERE w.id = ?",
        (wake_request_id,),
    )
    if row is None or row["session_agent"] != agent_id or row["session_owner"] != owner:
        raise AccessDeniedError(f"Wake request {wake_request_id} is not available to this session's principal.")
    return _record(row)


async def cancel(tx: Tx, wake_request_id: str) -> bool:
    """Cancel a request still waiting (queued or due); False if it had already moved on."""
    changed = await tx.execute(
        "UPDATE wake_requests SET status = 'cancelled', updated_at = ? WHERE id = ? AND status IN ('queued','due')",
        (utc_now(), wake_request_id),
    )
    return changed == 1


async def due_now(tx: Tx, agent_id: str, *, limit: int = 10) -> list[WakeRequest]:
    """The agent's queued requests whose time has come, most urgent first."""
    rows = await tx.fetchall(
        "SELECT w.* FROM wake_requests w JOIN sessions s ON s.id = w.session_id "
        f"WHERE w.status = 'queued' AND w.due_at <= ? AND s.agent_id = ? ORDER BY {PRIORITY_ORDER}, w.due_at, w.id "
        "LIMIT ?",
        (utc_now(), agent_id, limit),
    )
    return [_record(row) for row in rows]


async def take(tx: Tx, wake_request_id: str, to: Literal["running", "due"]) -> bool:
    """Move a queued request on; False if another process took it first."""
    changed = await tx.execute(
        "UPDATE wake_requests SET status = ?, updated_at = ? WHERE id = ? AND status = 'queued'",
        (to, utc_now(), wake_request_id),
    )
    return changed == 1


async def finish(tx: Tx, wake_request_id: str, *, ok: bool, result: str) -> None:
    """Record how a headless run of the request ended (its answer, or why it failed), bounded."""
    await tx.execute(
        "UPDATE wake_requests SET status = ?, result = ?, updated_at = ? WHERE id = ? AND status = 'running'",
        ("fired" if ok else "failed", result[:MAX_RESULT_CHARS], utc_now(), wake_request_id),
    )


async def offer_due(tx: Tx, session_id: str, wake_id: str) -> list[WakeRequest]:
    """Hand the session's due requests to the connection that just attached (wake `wake_id`), once each."""
    due = await list_for(tx, session_id, statuses=DUE, limit=50)
    offered: list[WakeRequest] = []
    now = utc_now()
    for record in due:
        changed = await tx.execute(
            "UPDATE wake_requests SET status = 'offered', offered_to = ?, updated_at = ? "
            "WHERE id = ? AND status = 'due'",
            (wake_id, now, record.id),
        )
        if changed == 1:
            offered.append(record.model_copy(update={"status": "offered", "offered_to": wake_id, "updated_at": now}))
    return offered
