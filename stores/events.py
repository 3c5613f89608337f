"""The append-only event log of each session: tool spans, wake spans, permission decisions, and more."""

from __future__ import annotations

import json
import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from managed_tools.stores.db import Row, Tx, as_dict, fulltext
from managed_tools.stores.db.migrations import wake_trace_rows
from managed_tools.stores.errors import NotFoundError
from managed_tools.stores.ids import utc_now, uuid7

TOOL_SPAN_TYPES = ("span.started", "span.completed")


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
    record = EventRecord(
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
    await _count_in_trace(tx, record)
    call = int(event_type == "span.completed" and payload.get("spanKind") == "tool")
    await tx.execute(
        "INSERT INTO session_event_counts (session_id, events, tool_calls) VALUES (?, 1, ?) ON CONFLICT (session_id) "
        "DO UPDATE SET events = session_event_counts.events + 1, "
        "tool_calls = session_event_counts.tool_calls + excluded.tool_calls",
        (session_id, call),
    )
    tool = payload.get("toolName")
    if event_type == "span.completed" and payload.get("result") == "success" and isinstance(tool, str):
        await tx.execute(
            "INSERT INTO session_tools (session_id, tool) VALUES (?, ?) ON CONFLICT DO NOTHING", (session_id, tool)
        )
    if tx.dialect.name == "postgresql" and (text := event_text(event_type, summary, payload)) is not None:
        await index_event(tx, seq, session_id, event_type, text)
    return record


async def _count_in_trace(tx: Tx, event: EventRecord) -> None:
    """The event in its wake's summary (migration 27): what session_list_traces and retention read instead of the
    events. The times are the earliest and latest seen, so a clock stepped back never makes a wake look older."""
    if event.wake_id is None:
        return
    earliest, latest = ("min", "max") if tx.dialect.name == "sqlite" else ("least", "greatest")
    tool = int(event.type in TOOL_SPAN_TYPES and event.payload.get("spanKind") == "tool")
    await tx.execute(
        "INSERT INTO wake_traces (wake_id, session_id, started_at, updated_at, event_count, tool_events, last_seq, "
        "latest_summary) VALUES (?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT (wake_id) DO UPDATE SET "
        f"started_at = {earliest}(wake_traces.started_at, excluded.started_at), "
        f"updated_at = {latest}(wake_traces.updated_at, excluded.updated_at), "
        "event_count = wake_traces.event_count + 1, tool_events = wake_traces.tool_events + excluded.tool_events, "
        "last_seq = excluded.last_seq, latest_summary = coalesce(excluded.latest_summary, wake_traces.latest_summary)",
        (event.wake_id, event.session_id, event.created_at, event.created_at, tool, event.seq, event.summary),
    )
    await tx.execute(
        "INSERT INTO wake_event_types (wake_id, type, first_seq) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        (event.wake_id, event.type, event.seq),
    )


async def recount_traces(tx: Tx, wake_ids: Sequence[str]) -> None:
    """The wakes' summaries made again from their events (after retention took some of them away)."""
    marks = ",".join("?" * len(wake_ids))
    for table in ("wake_traces", "wake_event_types"):
        await tx.execute(f"DELETE FROM {table} WHERE wake_id IN ({marks})", list(wake_ids))
    for statement in wake_trace_rows(tx.dialect, f"e.wake_id IN ({marks})"):
        await tx.execute(statement, list(wake_ids))


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
    """One summary per wake of the session, the most recently active wake first (from the kept summaries: the
    cost is the wakes listed, not the session's events)."""
    return await _traces(tx, "session_id = ? ORDER BY last_seq DESC LIMIT ?", [session_id, limit])


async def traces_of(tx: Tx, wake_ids: Collection[str]) -> dict[str, TraceSummary]:
    """The summary of each named wake that has events."""
    if not wake_ids:
        return {}
    marks = ",".join("?" * len(wake_ids))
    return {t.wake_id: t for t in await _traces(tx, f"wake_id IN ({marks})", list(wake_ids))}


async def _traces(tx: Tx, where: str, params: list[Any]) -> list[TraceSummary]:
    rows = await tx.fetchall(
        f"SELECT wake_id, started_at, updated_at, event_count, latest_summary FROM wake_traces WHERE {where}",
        params,
    )
    if not rows:
        return []
    marks = ",".join("?" * len(rows))
    types: dict[str, list[str]] = {}
    for row in await tx.fetchall(
        f"SELECT wake_id, type FROM wake_event_types WHERE wake_id IN ({marks}) ORDER BY first_seq",
        [row["wake_id"] for row in rows],
    ):
        types.setdefault(row["wake_id"], []).append(row["type"])
    return [TraceSummary(**as_dict(row), event_types=types.get(row["wake_id"], [])) for row in rows]


async def successful_tools(tx: Tx, session_id: str) -> list[str]:
    """The tools called with success in the session, by name, as each completion recorded them (session_tools):
    one row per tool however long the session has run, kept when retention compacts the spans they came from."""
    rows = await tx.fetchall("SELECT tool FROM session_tools WHERE session_id = ? ORDER BY tool", (session_id,))
    return [str(row["tool"]) for row in rows]


async def latest_summary(tx: Tx, session_id: str) -> str | None:
    value = await tx.scalar(
        "SELECT summary FROM events WHERE session_id = ? AND summary IS NOT NULL ORDER BY seq DESC LIMIT 1",
        (session_id,),
    )
    return None if value is None else str(value)


async def session_event_stats(tx: Tx, session_id: str) -> tuple[int, int, str | None]:
    """(number of events, number of unprocessed events, id of the newest event): a kept count, the partial index
    of unprocessed events, and the newest by seq, so the cost does not grow with the session."""
    row = await tx.fetchone(
        "SELECT (SELECT events FROM session_event_counts WHERE session_id = ?) AS n, "
        "(SELECT COUNT(*) FROM events WHERE session_id = ? AND processed = 0) AS pending, "
        "(SELECT id FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1) AS last_id",
        (session_id, session_id, session_id),
    )
    assert row is not None
    return int(row["n"] or 0), int(row["pending"]), row["last_id"]


@dataclass(frozen=True)
class HandedOffWork:
    """What a session's own wakes did after an event of it: a hand-off child's attached client at work."""

    calls: int  # tool calls completed in its wakes since
    answer: str | None  # the newest agent.message since, if any


async def last_seq(tx: Tx, session_id: str) -> int:
    return int(await tx.scalar("SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", (session_id,)))


async def handed_off_work(tx: Tx, session_id: str, after_seq: int) -> HandedOffWork:
    field = tx.dialect.json_text
    calls = await tx.scalar(
        "SELECT COUNT(*) FROM events WHERE session_id = ? AND seq > ? AND type = 'span.completed' "
        f"AND wake_id IS NOT NULL AND {field('payload', 'spanKind')} = 'tool'",
        (session_id, after_seq),
    )
    answer = await tx.scalar(
        f"SELECT {field('payload', 'text')} FROM events WHERE session_id = ? AND seq > ? AND type = 'agent.message' "
        "ORDER BY seq DESC LIMIT 1",
        (session_id, after_seq),
    )
    return HandedOffWork(int(calls), answer)


async def child_cursor(tx: Tx, parent_id: str, child_id: str) -> int:
    """The child's newest event when its parent last looked at it (its latest `session.child_idle`), or 0."""
    field = tx.dialect.json_text
    seen = await tx.scalar(
        f"SELECT {field('payload', 'childEventSeq')} FROM events WHERE session_id = ? AND type = 'session.child_idle' "
        f"AND {field('payload', 'childSessionId')} = ? ORDER BY seq DESC LIMIT 1",
        (parent_id, child_id),
    )
    return int(seen) if seen is not None else 0


async def count_tool_calls(tx: Tx, session_id: str) -> int:
    """Completed tool calls of the session (wake spans are not calls), as counted when each was recorded: calls
    whose spans retention compacted still count."""
    return int(await tx.scalar("SELECT tool_calls FROM session_event_counts WHERE session_id = ?", (session_id,)) or 0)


async def forget_events(tx: Tx, session_id: str, removed: int) -> None:
    """Retention took `removed` of the session's events away: its kept count follows."""
    await tx.execute("UPDATE session_event_counts SET events = events - ? WHERE session_id = ?", (removed, session_id))


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
