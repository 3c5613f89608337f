"""The full-text search index (SQLite FTS5 with bm25) over every searchable text of an agent.

Each text has a stable key, so rewriting a document replaces its entry. Queries are built here from quoted terms
and phrases only, so user text is never FTS syntax.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from managed_tools.stores.db import Tx
from managed_tools.stores.ids import utc_now

SNIPPET_CHARS = 180
RANK_WINDOW = 1_000
MAX_FETCH = 4096
# The agent's knowledge (its memory scope, learnings) is every principal's; a session's texts (its memory, outcome,
# evaluation, shell state) are its owner's alone, though a shared text also names the session that wrote it.
SHARED = "(session_id IS NULL OR key GLOB 'learning:*' OR key GLOB 'memory:agent:*')"


class SearchRow(BaseModel):
    key: str
    source: str
    session_id: str | None
    title: str
    created_at: str
    body: str
    snippet: str
    bm25: float


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def match_all(terms: list[str], phrases: list[str]) -> str:
    """An FTS5 query matching texts that hold every term and phrase; each is quoted, so no user text is syntax."""
    return " AND ".join(_quote(part) for part in [*phrases, *terms])


def match_any(terms: list[str], phrases: list[str]) -> str:
    return " OR ".join(_quote(part) for part in [*phrases, *terms])


def passes(terms: list[str], phrases: list[str], fallback_words: Sequence[str]) -> list[str]:
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
    await tx.execute(
        "INSERT INTO search_docs (key, source, agent_id, session_id, title, created_at, body) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET body = excluded.body, "
        "title = excluded.title, created_at = excluded.created_at",
        (key, source, agent_id, session_id, title, utc_now(), body),
    )


async def _ranked(tx: Tx, query: str, limit: int) -> list[tuple[int, float]]:
    """Best-first (rowid, bm25) among the newest RANK_WINDOW matches, inside the index alone.

    Walking matches in rowid order is cheap; scoring each with bm25 is not, so at most RANK_WINDOW are scored,
    and documents are joined only for the best `limit`.
    """
    edge = await tx.scalar(
        "SELECT rowid FROM search_fts WHERE search_fts MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
        (query, RANK_WINDOW - 1),
    )
    rows = await tx.fetchall(
        "SELECT rowid, bm25(search_fts) AS score FROM search_fts WHERE search_fts MATCH ? AND rowid >= ? "
        "ORDER BY score, rowid LIMIT ?",
        (query, edge or 0, limit),
    )
    return [(int(r[0]), float(r[1])) for r in rows]


async def _documents(
    tx: Tx, agent_id: str, owner: str, ranked: list[tuple[int, float]], needles: list[str]
) -> list[SearchRow]:
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
            created_at=r["created_at"], body=r["body"], snippet=make_snippet(r["body"], needles), bm25=score[r["id"]],
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
    needles = [*phrases, *terms]
    if not needles:
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
            rows = [r for r in await _documents(tx, agent_id, owner, ranked, needles) if r.key not in seen]
            if len(rows) >= wanted or len(ranked) < fetch or fetch >= MAX_FETCH:
                break
            fetch *= 4
        found.extend(rows[:wanted])
        seen.update(r.key for r in rows[:wanted])
    return found
