"""The append-only event log of each session: tool spans, wake spans, permission decisions, and more."""

from __future__ import annotations

import json
import shlex
from collections.abc import Collection, Sequence
from typing import Any

from pydantic import BaseModel

from managed_tools.stores.db import Row, Tx, as_dict, fulltext
from managed_tools.stores.errors import NotFoundError
from managed_tools.stores.ids import utc_now, uuid7


def command_line(args: object) -> str | None:
    """The command a shell call's recorded arguments run, as one line (`bash` keeps its argv apart), if any."""
    if not isinstance(args, dict) or not isinstance(command := args.get("command"), str):
        return None
    argv = args.get("args")
    if isinstance(argv, list) and all(isinstance(word, str) for word in argv):
        return shlex.join([command, *argv])
    return command


class EventHead(BaseModel):
    """Where an event sits: its order, ids, wake, type and time."""

    seq: int
    id: str
    session_id: str
    wake_id: str | None
    type: str
    created_at: str


class EventRecord(EventHead):
    processed: bool
    summary: str | None
    payload: dict[str, Any]


class TraceSummary(BaseModel):
    wake_id: str
    started_at: str
    updated_at: str
    event_count: int
    event_types: list[str]
    latest_summary: str | None


class EventFilter(BaseModel):
    """Filters applied after the positional window is chosen; `limit` keeps the last N that pass."""

    wake_id: str | None = None
    types: Sequence[str] | None = None
    include_processed: bool = True
    limit: int = 20


def _event(row: Row) -> EventRecord:
    data = as_dict(row)
    data["payload"] = json.loads(data["payload"])
    data["processed"] = bool(data["processed"])
    return EventRecord(**data)


async def append_event(
    tx: Tx,
    session_id: str,
    wake_id: str | None,
    event_type: str,
    payload: dict[str, Any],
    *,
    summary: str | None = None,
    processed: bool = True,
    created_at: str | None = None,
    touch: bool = True,
) -> EventRecord:
    """Append one event. `touch` moves the session's activity clock to it: every event is activity, but a tool
    call's two events touch the session once (at its completion), so the executor says `touch=False` for the
    start. `created_at` is when it happened, for an event written after the fact (a read's span.started)."""
    event_id, created_at = uuid7(), created_at or utc_now()
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    seq = int(
        await tx.scalar(
            "INSERT INTO events (id, session_id, wake_id, type, created_at, processed, summary, payload) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
            (event_id, session_id, wake_id, event_type, created_at, int(processed), summary, body),
        )
    )
    if touch:
        await tx.execute(
            "UPDATE sessions SET last_activity_at = ?, updated_at = ? WHERE id = ?",
            (created_at, created_at, session_id),
        )
    if tx.dialect.name == "postgresql" and (text := event_text(event_type, summary, payload)) is not None:
        await index_event(tx, seq, session_id, event_type, text)
    return EventRecord(
        seq=seq,
        id=event_id,
        session_id=session_id,
        wake_id=wake_id,
        type=event_type,
        created_at=created_at,
        processed=processed,
        summary=summary,
        payload=payload,
    )


# What an event's searchable text leaves out (SQLite: the event_search_docs view, migrations 8 and 11; keep in step).
_UNSEARCHED_KEYS = frozenset({"spanId", "spanKind", "argsDigest", "requestId"})
_SEARCH_TOOLS = frozenset({"session_search_context", "session_search_traces", "retrieval_search", "memory_search"})


def _strings(value: object, key: object = None) -> list[str]:
    """The string leaves of a JSON value in document order, as SQLite's json_tree walks them."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, k)]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, i)]
    return [value] if isinstance(value, str) and key not in _UNSEARCHED_KEYS else []


def event_text(event_type: str, summary: str | None, payload: dict[str, Any]) -> str | None:
    """An event's searchable text, or None for a search tool's own span (left out of the index)."""
    if event_type in ("span.started", "span.completed") and payload.get("toolName") in _SEARCH_TOOLS:
        return None
    leaves = " ".join(_strings(payload))
    # A NUL in a tool's arguments is JSON-escaped in the payload but raw in these leaves, and PostgreSQL refuses
    # it in text; it separates words as any non-word character does, so a space indexes the same words.
    return f"{summary or ''} {leaves}".strip(" ").replace("\x00", " ")


async def index_event(tx: Tx, seq: int, session_id: str, event_type: str, text: str) -> None:
    """PostgreSQL: index one appended event, in the appending transaction, under its session's agent and owner
    (SQLite's event_search_docs view of migration 11 spells the same pair into its `agent` token)."""
    await tx.execute(
        "INSERT INTO event_search (seq, agent_id, owner, session_id, type, body, words) "
        "SELECT ?, agent_id, owner, ?, ?, ?, ?::tsvector FROM sessions WHERE id = ?",
        (seq, session_id, event_type, text, fulltext.tsvector(fulltext.words(text)), session_id),
    )


async def _seq_of(tx: Tx, session_id: str, event_id: str) -> int:
    seq = await tx.scalar("SELECT seq FROM events WHERE session_id = ? AND id = ?", (session_id, event_id))
    if seq is None:
        raise NotFoundError(f"No event {event_id} exists in session {session_id}.")
    return int(seq)


async def _neighbour_seq(tx: Tx, session_id: str, seq: int, steps: int, *, before: bool) -> int:
    """The seq `steps` events before (or after) `seq` in the session, or the farthest one there is."""
    if steps <= 0:
        return seq
    op, order = ("<", "DESC") if before else (">", "ASC")
    value = await tx.scalar(
        f"SELECT seq FROM (SELECT seq FROM events WHERE session_id = ? AND seq {op} ? ORDER BY seq {order} "
        f"LIMIT ?) AS w ORDER BY seq {'ASC' if before else 'DESC'} LIMIT 1",
        (session_id, seq, steps),
    )
    return seq if value is None else int(value)


async def window_events(
    tx: Tx,
    session_id: str,
    flt: EventFilter,
    *,
    after_event_id: str | None = None,
    before_event_id: str | None = None,
    around_event_id: str | None = None,
    before_limit: int = 0,
    after_limit: int = 0,
) -> list[EventRecord]:
    """Events of one session in log order.

    `around_event_id` wins: the window is that event plus `before_limit` events before and `after_limit`
    after it. Otherwise the window is everything after `after_event_id` and before `before_event_id`.
    The filters then apply, and `flt.limit` keeps the last N.
    """
    low, high = 0, 2**62
    if around_event_id is not None:
        centre = await _seq_of(tx, session_id, around_event_id)
        low = await _neighbour_seq(tx, session_id, centre, before_limit, before=True)
        high = await _neighbour_seq(tx, session_id, centre, after_limit, before=False)
    else:
        if after_event_id is not None:
            low = await _seq_of(tx, session_id, after_event_id) + 1
        if before_event_id is not None:
            high = await _seq_of(tx, session_id, before_event_id) - 1
    sql = "SELECT * FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?"
    params: list[Any] = [session_id, low, high]
    if flt.wake_id is not None:
        sql += " AND wake_id = ?"
        params.append(flt.wake_id)
    if flt.types:
        sql += f" AND type IN ({','.join('?' * len(flt.types))})"
        params.extend(flt.types)
    if not flt.include_processed:
        sql += " AND processed = 0"
    sql = f"SELECT * FROM ({sql} ORDER BY seq DESC LIMIT ?) AS w ORDER BY seq ASC"
    rows = await tx.fetchall(sql, [*params, flt.limit])
    return [_event(row) for row in rows]


async def list_traces(tx: Tx, session_id: str, limit: int) -> list[TraceSummary]:
    """One summary per wake of the session, the most recently active wake first."""
    return await _traces(tx, "session_id = ?", [session_id], limit)


async def traces_of(tx: Tx, wake_ids: Collection[str]) -> dict[str, TraceSummary]:
    """The summary of each named wake that has events."""
    if not wake_ids:
        return {}
    marks = ",".join("?" * len(wake_ids))
    return {t.wake_id: t for t in await _traces(tx, f"wake_id IN ({marks})", list(wake_ids), len(wake_ids))}


async def _traces(tx: Tx, where: str, params: list[Any], limit: int) -> list[TraceSummary]:
    rows = await tx.fetchall(
        "SELECT wake_id, MIN(created_at) AS started_at, MAX(created_at) AS updated_at, COUNT(*) AS event_count, "
        "MAX(seq) AS last_seq, (SELECT e2.summary FROM events e2 WHERE e2.wake_id = e.wake_id "
        "AND e2.summary IS NOT NULL ORDER BY e2.seq DESC LIMIT 1) AS latest_summary "
        f"FROM events e WHERE {where} AND wake_id IS NOT NULL GROUP BY wake_id "
        "ORDER BY last_seq DESC LIMIT ?",
        [*params, limit],
    )
    traces: list[TraceSummary] = []
    for row in rows:
        type_rows = await tx.fetchall(
            "SELECT type FROM events WHERE wake_id = ? GROUP BY type ORDER BY MIN(seq)", (row["wake_id"],)
        )
        traces.append(
            TraceSummary(
                wake_id=row["wake_id"],
                started_at=row["started_at"],
                updated_at=row["updated_at"],
                event_count=row["event_count"],
                event_types=[t["type"] for t in type_rows],
                latest_summary=row["latest_summary"],
            )
        )
    return traces


async def latest_summary(tx: Tx, session_id: str) -> str | None:
    value = await tx.scalar(
        "SELECT summary FROM events WHERE session_id = ? AND summary IS NOT NULL ORDER BY seq DESC LIMIT 1",
        (session_id,),
    )
    return None if value is None else str(value)


async def session_event_stats(tx: Tx, session_id: str) -> tuple[int, int, str | None]:
    """(number of events, number of unprocessed events, id of the newest event)."""
    row = await tx.fetchone(
        "SELECT COUNT(*) AS n, COUNT(CASE WHEN processed = 0 THEN 1 END) AS pending, "
        "(SELECT id FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1) AS last_id "
        "FROM events WHERE session_id = ?",
        (session_id, session_id),
    )
    assert row is not None
    return int(row["n"]), int(row["pending"]), row["last_id"]


async def count_tool_calls(tx: Tx, session_id: str) -> int:
    """Completed tool calls of the session (wake spans are not calls)."""
    return int(
        await tx.scalar(
            "SELECT COUNT(*) FROM events WHERE session_id = ? AND type = 'span.completed' "
            f"AND {tx.dialect.json_text('payload', 'spanKind')} = 'tool'",
            (session_id,),
        )
    )


async def mark_processed(tx: Tx, session_id: str) -> list[str]:
    """Mark the session's pending events seen (a run of the session took them up); returns their ids."""
    rows = await tx.fetchall("SELECT id FROM events WHERE session_id = ? AND processed = 0 ORDER BY seq", (session_id,))
    await tx.execute("UPDATE events SET processed = 1 WHERE session_id = ? AND processed = 0", (session_id,))
    return [row["id"] for row in rows]


MOST_CALLED_WINDOW = 5000  # the latest completed calls counted: recent habits, at a bounded cost on a large state


async def most_called_tools(tx: Tx, limit: int) -> list[str]:
    """The tools called most among the latest completed calls of every session in this state, most first."""
    tool = tx.dialect.json_text("payload", "toolName")
    kind = tx.dialect.json_text("payload", "spanKind")
    rows = await tx.fetchall(
        f"SELECT tool, COUNT(*) AS n FROM (SELECT {tool} AS tool FROM events WHERE type = 'span.completed' "
        f"AND {kind} = 'tool' ORDER BY seq DESC LIMIT ?) recent WHERE tool IS NOT NULL "
        "GROUP BY tool ORDER BY n DESC, tool LIMIT ?",
        (MOST_CALLED_WINDOW, limit),
    )
    return [str(row["tool"]) for row in rows]
