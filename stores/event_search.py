"""Full-text search over the event log (the `events_fts` index, kept current by an insert trigger).

The agent, session and event type are index columns holding hex tokens, so every filter (this agent only, not the
current session, these sessions, these types) is applied inside FTS5 and never costs a place among the results.
As in `stores.search`, user text only ever reaches FTS5 as quoted strings.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from managed_tools.stores.db import Tx
from managed_tools.stores.search import match_all, match_any

# Matches are walked newest first; only the newest RANK_WINDOW of them are ranked by bm25 (recent work is what a
# search is mostly about, and it bounds the cost of a common word on a large log).
RANK_WINDOW = 2_000
BODY_WEIGHTS = "0, 0, 0, 1"  # bm25 weights: only the text counts, never the filter columns


class EventMatch(BaseModel):
    seq: int
    id: str
    session_id: str
    wake_id: str | None
    type: str
    created_at: str
    body: str
    bm25: float


@dataclass(frozen=True)
class EventScope:
    """Which events a search may return: always one agent's, optionally only some sessions or types."""

    agent_id: str
    exclude_session: str | None = None
    sessions: Collection[str] | None = None  # None: every session of the agent
    types: Sequence[str] | None = None


def _token(value: str) -> str:
    """The index's spelling of an id: its UTF-8 bytes in hex (one token, never FTS syntax, case-folded)."""
    return value.encode().hex()


def _any_of(column: str, values: Collection[str]) -> str:
    return f"{column}:(" + " OR ".join(_token(v) for v in sorted(values)) + ")"


def _expression(scope: EventScope, text: str) -> str:
    parts = [f"agent:{_token(scope.agent_id)}", f"body:({text})"]
    if scope.sessions is not None:
        parts.append(_any_of("session", scope.sessions))
    if scope.types:
        parts.append(_any_of("type", scope.types))
    expression = " AND ".join(parts)
    if scope.exclude_session is not None:
        expression = f"({expression}) NOT session:{_token(scope.exclude_session)}"
    return expression


async def _ranked(tx: Tx, expression: str, limit: int) -> list[tuple[int, float]]:
    """Best-first (seq, bm25) among the newest RANK_WINDOW matches."""
    edge = await tx.scalar(
        "SELECT rowid FROM events_fts WHERE events_fts MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
        (expression, RANK_WINDOW - 1),
    )
    rows = await tx.fetchall(
        f"SELECT rowid, bm25(events_fts, {BODY_WEIGHTS}) AS score FROM events_fts WHERE events_fts MATCH ? "
        "AND rowid >= ? ORDER BY score, rowid DESC LIMIT ?",
        (expression, edge or 0, limit),
    )
    return [(int(r[0]), float(r[1])) for r in rows]


async def _events(tx: Tx, ranked: list[tuple[int, float]]) -> list[EventMatch]:
    if not ranked:
        return []
    score = dict(ranked)
    rows = await tx.fetchall(
        "SELECT e.seq, e.id, e.session_id, e.wake_id, e.type, e.created_at, d.body FROM events e "
        f"JOIN event_search_docs d ON d.seq = e.seq WHERE e.seq IN ({','.join('?' * len(score))})",
        list(score),
    )
    found = [EventMatch(**dict(row), bm25=score[row["seq"]]) for row in rows]
    return sorted(found, key=lambda m: (m.bm25, -m.seq))


async def search_events(
    tx: Tx, scope: EventScope, terms: list[str], phrases: list[str], limit: int, *, fallback_words: Sequence[str] = ()
) -> list[EventMatch]:
    """Up to `limit` events in scope for these terms and phrases, best bm25 first.

    Events holding every term come first; only if they are fewer than `limit` do events holding any term (or any
    fallback word) fill the rest.
    """
    if not (terms or phrases) or (scope.sessions is not None and not scope.sessions):
        return []
    passes = [match_all(terms, phrases)]
    wider = [*terms, *(w for w in fallback_words if w not in terms)]
    if len(terms) + len(phrases) > 1 or len(wider) > len(terms):
        passes.append(match_any(wider, phrases))
    found: list[EventMatch] = []
    seen: set[int] = set()
    for text in passes:
        wanted = limit - len(found)
        if wanted <= 0:
            break
        ranked = await _ranked(tx, _expression(scope, text), wanted + len(seen))
        ranked = [pair for pair in ranked if pair[0] not in seen]
        rows = await _events(tx, ranked[:wanted])
        found.extend(rows)
        seen.update(m.seq for m in rows)
    return found
