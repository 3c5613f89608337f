"""Full-text search over the event log (the `events_fts` index, filled in batches by the calls' records).

SQLite: events are indexed INDEX_BATCH at a time by `index_pending`, in a call's record (its one round trip), not
one by one as they are appended; `events_fts_mark` says how far. A search reads the events past the mark itself
and matches them with the same words FTS5 sees (`stores.db.fulltext`), so it never misses one, and a killed
process leaves nothing unsearchable: the mark moves only in the transaction that indexed up to it.

The agent, session and event type are index columns holding hex tokens, so every filter (this agent only, not the
current session, these sessions, these types) is applied inside FTS5 and never costs a place among the results.
As in `stores.search`, user text only ever reaches FTS5 as quoted strings.

On PostgreSQL the store writes each event's text and words into `event_search` as it appends the event
(`stores.events.index_event`); the filters are plain columns there, and phrases are checked on the text
(`stores.db.fulltext`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from managed_tools.stores.db import Tx, as_dict, fulltext
from managed_tools.stores.db.fulltext import Match, match_all
from managed_tools.stores.events import EventHead
from managed_tools.stores.search import passes
from managed_tools.stores.sessions import LOCAL_OWNER


class EventMatch(EventHead):
    body: str  # the indexed text


@dataclass(frozen=True)
class EventScope:
    """Which events a search may return: always those of one agent's principal (its owner), optionally only some
    sessions or types."""

    agent_id: str
    owner: str
    exclude_session: str | None = None
    sessions: Collection[str] | None = None  # None: every session of the agent
    types: Sequence[str] | None = None


INDEX_BATCH = 64
MARK_HINT = "events_fts_mark"


async def index_pending(tx: Tx, upto: int, *, at_least: int = INDEX_BATCH) -> None:
    """SQLite, in a write transaction: index the events up to seq `upto` past the mark, if `at_least` of them wait."""
    if tx.dialect.name != "sqlite":
        return  # PostgreSQL: each event is indexed as it is appended (stores.events.index_event)
    # The mark only grows: while the one last read here is less than a batch behind, no batch is due, and the
    # mark is not read again (it is read once or twice a batch, not once a call).
    if upto - tx.hints.get(MARK_HINT, 0) < at_least:
        return
    mark = int(await tx.scalar("SELECT seq FROM events_fts_mark"))
    # A lower bound, unless a record earlier in this transaction moved the mark and the transaction then fails: a
    # batch ahead at most, which only delays the next batch (the mark itself is always read before indexing).
    tx.hints[MARK_HINT] = mark
    if upto - mark < at_least:
        return
    await tx.execute(
        "INSERT INTO events_fts(rowid, agent, session, type, body) "
        "SELECT seq, agent, session, type, body FROM event_search_docs WHERE seq > ? AND seq <= ?",
        (mark, upto),
    )
    await tx.execute("UPDATE events_fts_mark SET seq = ?", (upto,))


def _token(value: str) -> str:
    """The index's spelling of an id: its UTF-8 bytes in hex (one token, never FTS syntax, case-folded)."""
    return value.encode().hex()


def _agent(scope: EventScope) -> str:
    """The index's `agent` column: the agent and the session's owner (the view of migration 11)."""
    return scope.agent_id if scope.owner == LOCAL_OWNER else f"{scope.agent_id}\n{scope.owner}"


def _any_of(column: str, values: Collection[str]) -> str:
    return f"{column}:(" + " OR ".join(_token(v) for v in sorted(values)) + ")"


def _expression(scope: EventScope, query: Match) -> str:
    parts = [f"agent:{_token(_agent(scope))}", f"body:({query.fts5()})"]
    if scope.sessions is not None:
        parts.append(_any_of("session", scope.sessions))
    if scope.types:
        parts.append(_any_of("type", scope.types))
    expression = " AND ".join(parts)
    if scope.exclude_session is not None:
        expression = f"({expression}) NOT session:{_token(scope.exclude_session)}"
    return expression


async def _newest(tx: Tx, scope: EventScope, query: Match, limit: int) -> list[int]:
    """The seqs of the newest `limit` events in scope matching `query`. FTS5 walks its doclists backwards and stops
    there, so a common word costs what `limit` costs (a rare phrase of common words still walks their doclists)."""
    if tx.dialect.name == "postgresql":
        return await _newest_postgresql(tx, scope, query, limit)
    found = await _newest_unindexed(tx, scope, query, limit)
    if len(found) < limit:
        rows = await tx.fetchall(
            "SELECT rowid FROM events_fts WHERE events_fts MATCH ? ORDER BY rowid DESC LIMIT ?",
            (_expression(scope, query), limit - len(found)),
        )
        found.extend(int(r[0]) for r in rows)
    return found


async def _newest_unindexed(tx: Tx, scope: EventScope, query: Match, limit: int) -> list[int]:
    """SQLite: the newest `limit` events past the index's mark (fewer than a batch and a call's) matching `query`,
    matched on the words FTS5 would index; every one of them is newer than every indexed event."""
    sql = "SELECT seq, body FROM event_search_docs WHERE seq > (SELECT seq FROM events_fts_mark) AND agent = ?"
    params: list[object] = [_token(_agent(scope)).upper()]  # SQLite's hex() spells it in capitals
    if scope.sessions is not None:
        sql += f" AND session IN ({','.join('?' * len(scope.sessions))})"
        params.extend(_token(s).upper() for s in sorted(scope.sessions))
    if scope.types:
        sql += f" AND type IN ({','.join('?' * len(scope.types))})"
        params.extend(_token(t).upper() for t in scope.types)
    if scope.exclude_session is not None:
        sql += " AND session != ?"
        params.append(_token(scope.exclude_session).upper())
    rows = await tx.fetchall(f"{sql} ORDER BY seq DESC", params)
    return [int(r["seq"]) for r in rows if query.hits(fulltext.words(r["body"])) is not None][:limit]


async def _newest_postgresql(tx: Tx, scope: EventScope, query: Match, limit: int) -> list[int]:
    """As `_newest`: the GIN index and the scope's columns narrow the rows, newest first, and each candidate's
    phrases are checked on its text until `limit` match."""
    prefilter = query.tsquery()
    if prefilter is None:
        return []
    sql = "SELECT seq, body FROM event_search WHERE agent_id = ? AND owner = ? AND words @@ ?::tsquery"
    params: list[object] = [scope.agent_id, scope.owner, prefilter]
    if scope.sessions is not None:
        sql += f" AND session_id IN ({','.join('?' * len(scope.sessions))})"
        params.extend(sorted(scope.sessions))
    if scope.types:
        sql += f" AND type IN ({','.join('?' * len(scope.types))})"
        params.extend(scope.types)
    if scope.exclude_session is not None:
        sql += " AND session_id != ?"
        params.append(scope.exclude_session)
    found: list[int] = []
    below = 2**62
    batch = max(limit, 64)
    while len(found) < limit:
        rows = await tx.fetchall(f"{sql} AND seq < ? ORDER BY seq DESC LIMIT ?", [*params, below, batch])
        found.extend(int(r["seq"]) for r in rows if query.hits(fulltext.words(r["body"])) is not None)
        if len(rows) < batch:
            break
        below = int(rows[-1]["seq"])
    return found[:limit]


async def _events(tx: Tx, seqs: list[int]) -> list[EventMatch]:
    if not seqs:
        return []
    docs = "event_search_docs" if tx.dialect.name == "sqlite" else "event_search"
    rows = await tx.fetchall(
        "SELECT e.seq, e.id, e.session_id, e.wake_id, e.type, e.created_at, d.body FROM events e "
        f"JOIN {docs} d ON d.seq = e.seq WHERE e.seq IN ({','.join('?' * len(seqs))})",
        seqs,
    )
    return sorted((EventMatch(**as_dict(row)) for row in rows), key=lambda m: -m.seq)


async def search_events(
    tx: Tx,
    scope: EventScope,
    terms: list[str],
    phrases: list[str],
    limit: int,
    *,
    whole: str = "",
    fallback_words: Sequence[str] = (),
) -> list[EventMatch]:
    """Up to `limit` candidate events in scope, in passes from the closest match to the loosest, newest first in
    each: the `whole` query as one phrase, then events holding every term and phrase, then events holding any.

    No bm25: its statistics read every doclist of a common word (2-3 ms a query on 100k events), and the
    reference ranks by its lexical score and recency alone, which the passes follow.
    """
    if not (terms or phrases) or (scope.sessions is not None and not scope.sessions):
        return []
    queries = passes(terms, phrases, fallback_words)
    if len(terms) + len(phrases) > 1 and whole.strip():
        queries.insert(0, match_all([], [whole]))
    found: list[EventMatch] = []
    seen: set[int] = set()
    for text in queries:
        wanted = limit - len(found)
        if wanted <= 0:
            break
        seqs = [seq for seq in await _newest(tx, scope, text, wanted + len(seen)) if seq not in seen]
        rows = await _events(tx, seqs[:wanted])
        found.extend(rows)
        seen.update(m.seq for m in rows)
    return found
