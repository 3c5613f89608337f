"""What a person watching the server reads (the dashboard, server/dashboard/): recent sessions and their wakes,
events after a sequence number, memory and substrate versions with the diff each made, outcome grades over time,
and refusals. Reads only, bounded, and cheap enough to poll: each is one indexed query or a few.

Nothing here filters by principal: the dashboard is the local operator's, who holds the state file anyway.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Literal

from pydantic import BaseModel

from managed_tools.stores import memory
from managed_tools.stores.db import Tx, as_dict

MAX_SESSIONS = 30
MAX_WAKES = 5  # per session, newest first
MAX_EVENTS = 200  # per poll
MAX_VERSIONS = 40
MAX_GRADES = 60
MAX_REFUSALS = 30
MAX_DIFF_LINES = 400
VersionStore = Literal["memory", "substrate"]
# A grade's height on the trend chart: how close the session's outcome is to done.
GRADE_LEVELS = {"missing_outcome": 0, "blocked": 0, "in_progress": 1, "done_candidate": 2}
# A completion event carries what the egress proxy refused (`networkBlocked`; older ones only in the shell's output,
# tools/shell/runner.py); the error kinds that are a refusal (the sandbox's, a person's).
NETWORK_BLOCKED = "network blocked: "
REFUSING_KINDS = ("sandbox_refused", "permission", "requires_action")


class WakeView(BaseModel):
    id: str
    started_at: str
    ended_at: str | None
    transport: str


class SessionView(BaseModel):
    id: str
    agent_id: str
    parent_id: str | None
    title: str | None
    status: str
    last_activity_at: str
    events: int
    wakes: list[WakeView]


class EventView(BaseModel):
    seq: int
    session_id: str
    wake_id: str | None
    type: str
    created_at: str
    summary: str | None
    tool: str | None


class VersionView(BaseModel):
    store: VersionStore
    id: str
    document: str  # memory: "scope/target"; substrate: the target path
    created_at: str
    size_bytes: int
    source: str


class GradeView(BaseModel):
    session_id: str
    evaluated_at: str
    iteration: int
    status: str
    level: int


class RefusalView(BaseModel):
    seq: int
    session_id: str
    created_at: str
    tool: str | None
    kind: str  # "network", "denied", "waiting" (for a person's answer, not refused) or the call's error kind
    detail: str


async def sessions(tx: Tx) -> list[SessionView]:
    rows = await tx.fetchall(
        "SELECT s.id, s.agent_id, s.parent_id, s.title, s.status, s.last_activity_at, "
        "coalesce((SELECT c.events FROM session_event_counts c WHERE c.session_id = s.id), 0) AS events "
        "FROM sessions s ORDER BY s.last_activity_at DESC, s.id DESC LIMIT ?",
        (MAX_SESSIONS,),
    )
    views = [SessionView(**as_dict(row), wakes=[]) for row in rows]
    for view in views:
        wakes = await tx.fetchall(
            "SELECT id, started_at, ended_at, transport FROM wakes WHERE session_id = ? "
            "ORDER BY started_at DESC, id DESC LIMIT ?",
            (view.id, MAX_WAKES),
        )
        view.wakes = [WakeView(**as_dict(w)) for w in wakes]
    return views


async def last_seq(tx: Tx) -> int:
    return int(await tx.scalar("SELECT coalesce(max(seq), 0) FROM events"))


async def events_after(tx: Tx, seq: int, limit: int = MAX_EVENTS) -> list[EventView]:
    """Events past `seq`, oldest first: a primary-key range read, cheap to poll."""
    rows = await tx.fetchall(
        "SELECT seq, session_id, wake_id, type, created_at, summary, payload FROM events WHERE seq > ? "
        "ORDER BY seq LIMIT ?",
        (seq, limit),
    )
    return [_event(row) for row in rows]


async def recent_events(tx: Tx, limit: int = 50) -> list[EventView]:
    rows = await tx.fetchall(
        "SELECT seq, session_id, wake_id, type, created_at, summary, payload FROM events ORDER BY seq DESC LIMIT ?",
        (limit,),
    )
    return [_event(row) for row in reversed(rows)]


def _event(row: Any) -> EventView:
    payload = _payload(row["payload"])
    tool = payload.get("toolName")
    return EventView(
        seq=row["seq"],
        session_id=row["session_id"],
        wake_id=row["wake_id"],
        type=row["type"],
        created_at=row["created_at"],
        summary=row["summary"],
        tool=tool if isinstance(tool, str) else None,
    )


def _payload(text: str) -> dict[str, Any]:
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


async def versions(tx: Tx) -> list[VersionView]:
    """The newest memory and substrate versions, newest first."""
    memory = await tx.fetchall(
        "SELECT id, scope, target, created_at, size_bytes, source FROM memory_versions "
        "ORDER BY created_at DESC, id DESC LIMIT ?",
        (MAX_VERSIONS,),
    )
    substrate = await tx.fetchall(
        "SELECT id, target_path, created_at, size_bytes, restored_from_version_id FROM substrate_versions "
        "ORDER BY seq DESC LIMIT ?",
        (MAX_VERSIONS,),
    )
    views = [
        VersionView(
            store="memory",
            id=r["id"],
            document=f"{r['scope']}/{r['target']}",
            created_at=r["created_at"],
            size_bytes=r["size_bytes"],
            source=r["source"],
        )
        for r in memory
    ] + [
        VersionView(
            store="substrate",
            id=r["id"],
            document=r["target_path"],
            created_at=r["created_at"],
            size_bytes=r["size_bytes"],
            source="restore" if r["restored_from_version_id"] else "promote",
        )
        for r in substrate
    ]
    views.sort(key=lambda v: v.created_at, reverse=True)
    return views[:MAX_VERSIONS]


async def version_diff(tx: Tx, store: VersionStore, version_id: str) -> str | None:
    """The unified diff of a version against the one before it of the same document (all added for a first
    version), at most MAX_DIFF_LINES lines; None when there is no such version."""
    if store == "memory":
        row = await tx.fetchone("SELECT scope, target, seq FROM memory_versions WHERE id = ?", (version_id,))
        if row is None:
            return None
        before_id = await tx.scalar(
            "SELECT id FROM memory_versions WHERE scope = ? AND target = ? AND seq < ? ORDER BY seq DESC LIMIT 1",
            (row["scope"], row["target"], row["seq"]),
        )
        old = "" if before_id is None else await memory.content_of(tx, str(before_id))
        new = await memory.content_of(tx, version_id)
        name = f"{row['scope']}/{row['target']}"
    else:
        row = await tx.fetchone(
            "SELECT seq, agent_id, target_path, content FROM substrate_versions WHERE id = ?", (version_id,)
        )
        if row is None:
            return None
        before = await tx.fetchone(
            "SELECT content FROM substrate_versions WHERE agent_id = ? AND target_path = ? AND seq < ? "
            "ORDER BY seq DESC LIMIT 1",
            (row["agent_id"], row["target_path"], row["seq"]),
        )
        name = row["target_path"]
        old = "" if before is None else str(before["content"])
        new = str(row["content"])
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), f"{name} (before)", version_id, lineterm=""))
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... {len(lines) - MAX_DIFF_LINES} more lines"]
    return "\n".join(lines) if lines else "(no change in content)"


async def grades(tx: Tx) -> list[GradeView]:
    """The latest outcome evaluations, oldest first (the trend chart reads left to right)."""
    rows = await tx.fetchall(
        "SELECT session_id, evaluated_at, iteration, grade_status FROM outcome_evaluations "
        "ORDER BY evaluated_at DESC, id DESC LIMIT ?",
        (MAX_GRADES,),
    )
    return [
        GradeView(
            session_id=r["session_id"],
            evaluated_at=r["evaluated_at"],
            iteration=r["iteration"],
            status=r["grade_status"],
            level=GRADE_LEVELS.get(r["grade_status"], 0),
        )
        for r in reversed(rows)
    ]


async def refusals(tx: Tx) -> list[RefusalView]:
    """What was refused, newest first: paths the sandbox refused (a way out of a mount), destinations the egress
    proxy refused a command, calls a person denied, and calls that ended refused (no permission, waiting for one)."""
    kinds = " OR ".join("payload LIKE ?" for _ in REFUSING_KINDS)
    rows = await tx.fetchall(
        "SELECT seq, session_id, created_at, type, payload FROM events WHERE "
        f"(type = 'span.completed' AND (payload LIKE ? OR payload LIKE ? OR {kinds})) "
        "OR (type = 'permission.decided' AND payload LIKE ?) ORDER BY seq DESC LIMIT ?",
        (
            '%"networkBlocked":[%',
            f"%{NETWORK_BLOCKED}%",
            *(f'%"errorKind":"{kind}"%' for kind in REFUSING_KINDS),
            '%"allowed":false%',
            MAX_REFUSALS,
        ),
    )
    return [_refusal(row) for row in rows]


def _words(text: str, most: int) -> str:
    """At most `most` characters, cut at a word's end (with an ellipsis), never inside one."""
    if len(text) <= most:
        return text
    cut = text[: most - 1]
    return (cut.rsplit(maxsplit=1)[0] if " " in cut else cut) + "…"


def _refusal(row: Any) -> RefusalView:
    payload = _payload(row["payload"])
    tool = payload.get("toolName") if isinstance(payload.get("toolName"), str) else None
    if row["type"] == "permission.decided":
        kind, detail = "denied", f"denied by {payload.get('by', 'a person')}"
    else:
        text = " ".join(str(payload.get(key, "")) for key in ("error", "resultSummary"))
        at = text.find(NETWORK_BLOCKED)
        if isinstance(payload.get("networkBlocked"), list) and payload["networkBlocked"]:
            kind, detail = "network", "; ".join(str(b) for b in payload["networkBlocked"])[:300]
        elif at >= 0:
            kind, detail = "network", text[at + len(NETWORK_BLOCKED) :].split("\n")[0][:300]
        elif isinstance(payload.get("waitsFor"), str) or payload.get("errorKind") == "requires_action":
            kind, detail = "waiting", _words(str(payload.get("error", "")), 300)  # a person was asked: no refusal
        else:
            kind, detail = str(payload.get("errorKind")), _words(str(payload.get("error", "")), 300)
    return RefusalView(
        seq=row["seq"], session_id=row["session_id"], created_at=row["created_at"], tool=tool, kind=kind, detail=detail
    )
