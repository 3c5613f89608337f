"""Sessions (the durable unit of work) and wakes (one attachment of a connection to a session)."""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel

from managed_tools.stores.db import Row, Tx, as_dict, insert
from managed_tools.stores.errors import AccessDeniedError, NotFoundError
from managed_tools.stores.ids import utc_now, uuid7

SessionStatus = Literal["idle", "running", "requires_action", "terminated"]
LOCAL_OWNER = ""  # the one principal of stdio and static-token set-ups (an OAuth principal: server/auth/principal.py)


class SessionRecord(BaseModel):
    id: str
    agent_id: str
    owner: str
    parent_id: str | None
    title: str | None
    status: SessionStatus
    stop_reason: str | None
    created_at: str
    updated_at: str
    last_activity_at: str


class WakeRecord(BaseModel):
    id: str
    session_id: str
    started_at: str
    ended_at: str | None
    transport: str
    pid: int
    setup_fingerprint: str


def _session(row: Row) -> SessionRecord:
    return SessionRecord(**as_dict(row))


async def create_session(
    tx: Tx, agent_id: str, *, owner: str = LOCAL_OWNER, parent_id: str | None = None, title: str | None = None
) -> SessionRecord:
    now = utc_now()
    record = SessionRecord(
        id=uuid7(),
        agent_id=agent_id,
        owner=owner,
        parent_id=parent_id,
        title=title,
        status="idle",
        stop_reason=None,
        created_at=now,
        updated_at=now,
        last_activity_at=now,
    )
    await insert(tx, "sessions", record)
    return record


async def get_session(tx: Tx, session_id: str) -> SessionRecord:
    row = await tx.fetchone("SELECT * FROM sessions WHERE id = ?", (session_id,))
    if row is None:
        raise NotFoundError(f"Session {session_id} does not exist.")
    return _session(row)


async def get_agent_session(tx: Tx, session_id: str, agent_id: str, *, owner: str) -> SessionRecord:
    """The session, only if it belongs to `agent_id` and `owner` (a tool never reaches another agent's sessions,
    nor another principal's)."""
    row = await tx.fetchone("SELECT * FROM sessions WHERE id = ?", (session_id,))
    if row is None or row["agent_id"] != agent_id or row["owner"] != owner:
        # The same message whether it exists or not: another agent's (or principal's) ids are not confirmed.
        raise AccessDeniedError(f"Session {session_id} is not available to agent {agent_id}.")
    return _session(row)


async def list_agent_sessions(
    tx: Tx, agent_id: str, *, owner: str, active_since: str | None = None, limit: int | None = None
) -> list[SessionRecord]:
    """The sessions of the agent's `owner` (all, or the `limit` latest), most recently active first."""
    sql = "SELECT * FROM sessions WHERE agent_id = ? AND owner = ?"
    params: list[str | int] = [agent_id, owner]
    if active_since is not None:
        sql += " AND last_activity_at >= ?"
        params.append(active_since)
    sql += " ORDER BY last_activity_at DESC, id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    rows = await tx.fetchall(sql, params)
    return [_session(row) for row in rows]


async def recent_summaries(
    tx: Tx, agent_id: str, *, owner: str, limit: int
) -> list[tuple[str, SessionStatus, str, str]]:
    """(id, status, last activity, newest event summary) of the `limit` most recently active sessions of the agent's
    `owner` that have a summary, most recent first (as list_agent_sessions orders them): what memory_search reads
    of each checkpoint, in one statement and without building the sessions' records."""
    rows = await tx.fetchall(
        "SELECT s.id, s.status, s.last_activity_at, (SELECT e.summary FROM events e WHERE e.session_id = s.id AND "
        "e.summary IS NOT NULL ORDER BY e.seq DESC LIMIT 1) AS summary FROM (SELECT id, status, last_activity_at "
        "FROM sessions WHERE agent_id = ? AND owner = ? ORDER BY last_activity_at DESC, id DESC LIMIT ?) s "
        "ORDER BY s.last_activity_at DESC, s.id DESC",
        (agent_id, owner, limit),
    )
    return [(r["id"], r["status"], r["last_activity_at"], r["summary"]) for r in rows if r["summary"] is not None]


async def child_counts(tx: Tx, agent_id: str, *, owner: str) -> dict[str, int]:
    rows = await tx.fetchall(
        "SELECT parent_id, COUNT(*) AS n FROM sessions WHERE agent_id = ? AND owner = ? AND parent_id IS NOT NULL "
        "GROUP BY parent_id",
        (agent_id, owner),
    )
    return {row["parent_id"]: row["n"] for row in rows}


async def open_wake(tx: Tx, session_id: str, *, transport: str, setup_fingerprint: str) -> WakeRecord:
    record = WakeRecord(
        id=uuid7(),
        session_id=session_id,
        started_at=utc_now(),
        ended_at=None,
        transport=transport,
        pid=os.getpid(),
        setup_fingerprint=setup_fingerprint,
    )
    await insert(tx, "wakes", record)
    return record


async def close_wake(tx: Tx, wake_id: str) -> None:
    await tx.execute("UPDATE wakes SET ended_at = ? WHERE id = ? AND ended_at IS NULL", (utc_now(), wake_id))


async def latest_wake(tx: Tx, session_id: str) -> WakeRecord | None:
    row = await tx.fetchone(
        "SELECT * FROM wakes WHERE session_id = ? ORDER BY started_at DESC, id DESC LIMIT 1", (session_id,)
    )
    return None if row is None else WakeRecord(**as_dict(row))


async def latest_setup_fingerprints(tx: Tx, agent_id: str) -> dict[str, str]:
    """The setup fingerprint of each session's newest wake."""
    rows = await tx.fetchall(
        "SELECT w.session_id, w.setup_fingerprint FROM wakes w JOIN sessions s ON s.id = w.session_id "
        "WHERE s.agent_id = ? AND w.id = (SELECT id FROM wakes WHERE session_id = w.session_id "
        "ORDER BY started_at DESC, id DESC LIMIT 1)",
        (agent_id,),
    )
    return {row["session_id"]: row["setup_fingerprint"] for row in rows}


async def get_many(tx: Tx, session_ids: Collection[str]) -> dict[str, tuple[SessionRecord, str | None]]:
    """Each named session with the setup fingerprint of its newest wake (None if it never connected)."""
    if not session_ids:
        return {}
    marks = ",".join("?" * len(session_ids))
    rows = await tx.fetchall(
        "SELECT s.*, (SELECT setup_fingerprint FROM wakes WHERE session_id = s.id ORDER BY started_at DESC, id DESC "
        f"LIMIT 1) AS setup FROM sessions s WHERE s.id IN ({marks})",
        list(session_ids),
    )
    return {row["id"]: (SessionRecord(**{k: row[k] for k in SessionRecord.model_fields}), row["setup"]) for row in rows}


async def list_children(tx: Tx, agent_id: str, parent_id: str, *, owner: str) -> list[SessionRecord]:
    """The direct children of `parent_id` that belong to `agent_id` and `owner`, most recently active first."""
    rows = await tx.fetchall(
        "SELECT * FROM sessions WHERE agent_id = ? AND owner = ? AND parent_id = ? "
        "ORDER BY last_activity_at DESC, id DESC",
        (agent_id, owner, parent_id),
    )
    return [_session(row) for row in rows]


async def open_wakes(tx: Tx, session_id: str) -> int:
    """How many connections are attached to the session now (wakes not yet closed)."""
    return int(await tx.scalar("SELECT COUNT(*) FROM wakes WHERE session_id = ? AND ended_at IS NULL", (session_id,)))


class Attendance(BaseModel):
    """Who may be waiting on a session now: the processes of its open wakes, and when it last did anything."""

    open_wake_pids: tuple[int, ...]
    last_activity_at: str


async def attendance(tx: Tx, session_ids: Collection[str]) -> dict[str, Attendance]:
    """Each named session's open wakes (their server processes) and last activity (`pending` sorts by it)."""
    if not session_ids:
        return {}
    marks = ",".join("?" * len(session_ids))
    rows = await tx.fetchall(
        f"SELECT s.id, s.last_activity_at, w.pid FROM sessions s LEFT JOIN wakes w ON w.session_id = s.id "
        f"AND w.ended_at IS NULL WHERE s.id IN ({marks})",
        list(session_ids),
    )
    found: dict[str, Attendance] = {}
    for row in rows:
        seen = found.get(row["id"])
        pids = (*(seen.open_wake_pids if seen else ()), *([row["pid"]] if row["pid"] is not None else []))
        found[row["id"]] = Attendance(open_wake_pids=pids, last_activity_at=row["last_activity_at"])
    return found
