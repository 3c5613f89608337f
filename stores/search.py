"""The full-text search index (bm25) over every searchable text of an agent: SQLite's FTS5, or on PostgreSQL the
same words, matches and scores through `stores.db.fulltext`.

Each text has a stable key, so rewriting a document replaces its entry. Queries are built here from quoted terms
and phrases only, so user text is never FTS syntax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from managed_tools.stores.db import Tx, fulltext
from managed_tools.stores.db.fulltext import Match, match_all, match_any
from managed_tools.stores.ids import utc_now

SNIPPET_CHARS = 180
RANK_WINDOW = 256
MAX_FETCH = 4096
# The agent's knowledge (its memory scope, learnings) is every principal's; a session's texts (its memory, outcome,
# evaluation, shell state) are its owner's alone, though a shared text also names the session that wrote it.
# (A key prefix by substr: GLOB is SQLite's alone, and LIKE folds case and reads `_` as a wildcard.)
SHARED = "(session_id IS NULL OR substr(key, 1, 9) = 'learning:' OR substr(key, 1, 13) = 'memory:agent:')"


@dataclass(frozen=True)
class SearchRow:
    """A text found, with its bm25 (0 for a text read rather than indexed). A plain record: a search builds dozens
    from the store's own rows and shows a few (their snippets are cut for those alone, with `make_snippet`)."""

    key: str
    source: str
    session_id: str | None
    title: str
    created_at: str
    body: str
    bm25: float


# Candidate rows a PostgreSQL pass reads at a time while it looks for RANK_WINDOW exact matches.
_BATCH = 512


def passes(terms: list[str], phrases: list[str], fallback_words: Sequence[str]) -> list[Match]:
    """The queries a search runs in turn: every term and phrase, then (when that differs) any term, phrase or
    fallback word."""
    found = [match_all(terms, phrases)]
    wider = [*terms, *(w for w in fallback_words if w not in terms)]
    if len(terms) + len(phrases) > 1 or len(wider) > len(terms):
        found.append(match_any(wider, phrases))
    return found


def make_snippet(body: str, needles: list[str], width: int = SNIPPET_CHARS) -> str:
    """About `width` characters around the first needle found (or the start), whitespace collapsed."""
    lower = body.lower()
    hits = [i for i in (lower.find(n.lower()) for n in needles if n) if i >= 0]
    start = max(0, min(hits) - width // 3) if hits else 0
    piece = " ".join(body[start : start + width].split())
    return ("…" if start else "") + piece + ("…" if start + width < len(body) else "")


async def upsert(
    tx: Tx, *, key: str, source: str, agent_id: str, session_id: str | None, title: str, body: str
) -> None:
    if not body.strip():
        await tx.execute("DELETE FROM search_docs WHERE key = ?", (key,))
        return
    if tx.dialect.name == "postgresql":
        tokens = fulltext.words(body)
        await tx.execute(
            "INSERT INTO search_docs (key, source, agent_id, session_id, title, created_at, body, tokens, words) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?::tsvector) ON CONFLICT(key) DO UPDATE SET body = excluded.body, "
            "title = excluded.title, created_at = excluded.created_at, tokens = excluded.tokens, "
            "words = excluded.words",
            (key, source, agent_id, session_id, title, utc_now(), body, len(tokens), fulltext.tsvector(tokens)),
        )
        return
    await tx.execute(
        "INSERT INTO search_docs (key, source, agent_id, session_id, title, created_at, body) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET body = excluded.body, "
        "title = excluded.title, created_at = excluded.created_at",
        (key, source, agent_id, session_id, title, utc_now(), body),
    )


async def _ranked(tx: Tx, query: Match, limit: int) -> list[tuple[int, float]]:
    """Best-first (rowid, bm25) among the newest RANK_WINDOW matches, inside the index alone.

    One walk of the matches in rowid order, newest first, with FTS5's `rank` (bm25) of each match it returns and
    a LIMIT: a common word costs RANK_WINDOW scores, no more than a rare one, and a phrase of common words is
    walked once. The window is sorted here; documents are joined only for the best `limit`.
    """
    if tx.dialect.name == "postgresql":
        return await _ranked_postgresql(tx, query, limit)
    rows = await tx.fetchall(
        "SELECT rowid, rank FROM search_fts WHERE search_fts MATCH ? ORDER BY rowid DESC LIMIT ?",
        (query.fts5(), RANK_WINDOW),
    )
    return sorted(((int(r[0]), float(r[1])) for r in rows), key=lambda pair: (pair[1], pair[0]))[:limit]


async def _ranked_postgresql(tx: Tx, query: Match, limit: int) -> list[tuple[int, float]]:
    """The same window and scores as FTS5's: the GIN index narrows the rows, each candidate's phrases are counted
    on its text, and the index-wide statistics bm25 needs are read as FTS5 keeps them."""
    prefilter = query.tsquery()
    if prefilter is None:
        return []
    window: list[tuple[int, int, list[int]]] = []  # (id, tokens, hits of each phrase), newest first
    below: int | None = None
    while len(window) < RANK_WINDOW:
        rows = await tx.fetchall(
            "SELECT id, tokens, body FROM search_docs WHERE words @@ ?::tsquery AND id < ? ORDER BY id DESC LIMIT ?",
            (prefilter, 2**62 if below is None else below, _BATCH),
        )
        for row in rows:
            hits = query.hits(fulltext.words(row["body"]))
            if hits is not None and len(window) < RANK_WINDOW:
                window.append((int(row["id"]), int(row["tokens"]), hits))
        if len(rows) < _BATCH:
            break
        below = int(rows[-1]["id"])
    if not window:
        return []
    totals = await tx.fetchone("SELECT COUNT(*) AS n, COALESCE(SUM(tokens), 0) AS total FROM search_docs")
    assert totals is not None
    count, average = int(totals["n"]), int(totals["total"]) / int(totals["n"])
    rows_with = [await _rows_with(tx, phrase) for phrase in query.phrases()]
    scored = [(doc, fulltext.bm25(hits, size, count, average, rows_with)) for doc, size, hits in window]
    return sorted(scored, key=lambda pair: (pair[1], pair[0]))[:limit]


async def _rows_with(tx: Tx, phrase: list[str]) -> int:
    """How many texts of the whole index hold the phrase (FTS5's n(q) for its idf)."""
    single = fulltext.Match((" ".join(phrase),), every=True)
    prefilter = single.tsquery()
    if prefilter is None:
        return 0
    if len(phrase) == 1:
        return int(await tx.scalar("SELECT COUNT(*) FROM search_docs WHERE words @@ ?::tsquery", (prefilter,)))
    rows = await tx.fetchall("SELECT body FROM search_docs WHERE words @@ ?::tsquery", (prefilter,))
    return sum(1 for row in rows if fulltext.occurrences(fulltext.words(row["body"]), phrase))


async def _documents(tx: Tx, agent_id: str, owner: str, ranked: list[tuple[int, float]]) -> list[SearchRow]:
    if not ranked:
        return []
    score = dict(ranked)
    marks = ",".join("?" * len(ranked))
    rows = await tx.fetchall(
        f"SELECT id, key, source, session_id, title, created_at, body FROM search_docs WHERE id IN ({marks}) "
        f"AND agent_id = ? AND ({SHARED} OR session_id IN (SELECT id FROM sessions WHERE owner = ?))",
        [*score, agent_id, owner],
    )
    found = [
        SearchRow(
            key=r["key"], source=r["source"], session_id=r["session_id"], title=r["title"],
            created_at=r["created_at"], body=r["body"], bm25=score[r["id"]],
        )
        for r in rows
    ]  # fmt: skip
    return sorted(found, key=lambda row: (row.bm25, row.key))


async def search(
    tx: Tx,
    agent_id: str,
    terms: list[str],
    phrases: list[str],
    limit: int,
    *,
    owner: str,
    fallback_words: Sequence[str] = (),
) -> list[SearchRow]:
    """Up to `limit` of the agent's texts for these terms and phrases that `owner` may read, best bm25 first.

    Texts holding every term come first; only if they are fewer than `limit` do texts holding any term fill the
    rest. Each pass ranks at most the newest RANK_WINDOW matching texts, which bounds its cost on a large index
    (memory is mostly about recent work; an older text still turns up when the words are specific enough).
    """
    if not phrases and not terms:
        return []
    found: list[SearchRow] = []
    seen: set[str] = set()
    for query in passes(terms, phrases, fallback_words):
        wanted = limit - len(found)
        if wanted <= 0:
            break
        fetch = wanted * 2
        while True:  # another agent's texts may take places: widen until enough are ours or none are left
            ranked = await _ranked(tx, query, fetch)
            rows = [r for r in await _documents(tx, agent_id, owner, ranked) if r.key not in seen]
            if len(rows) >= wanted or len(ranked) < fetch or fetch >= MAX_FETCH:
                break
            fetch *= 4
        found.extend(rows[:wanted])
        seen.update(r.key for r in rows[:wanted])
    return found
