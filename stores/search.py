"""The full-text search index (SQLite FTS5 with bm25) over every searchable text of an agent.

Each text has a stable key, so rewriting a document replaces its entry. Queries are built by the caller from
quoted terms only (see `fts_query`), so user text is never FTS syntax.
"""

from __future__ import annotations

import sqlite3

from pydantic import BaseModel

from stores.db import Tx
from stores.ids import utc_now

SNIPPET_TOKENS = 24


class SearchRow(BaseModel):
    key: str
    source: str
    session_id: str | None
    title: str
    created_at: str
    body: str
    snippet: str
    bm25: float


def fts_query(terms: list[str], phrases: list[str]) -> str:
    """An FTS5 query that matches any term or phrase, each quoted so that no user text is operator syntax."""

    def quote(text: str) -> str:
        return '"' + text.replace('"', '""') + '"'

    return " OR ".join(quote(part) for part in [*phrases, *terms])


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


async def search(tx: Tx, agent_id: str, query: str, limit: int) -> list[SearchRow]:
    """The `limit` best matches of the agent's texts by bm25 (smaller is better), ties broken by id."""
    try:
        rows = await tx.fetchall(
            "SELECT d.key, d.source, d.session_id, d.title, d.created_at, d.body, "
            f"snippet(search_fts, 0, '', '', '…', {SNIPPET_TOKENS}) AS snippet, bm25(search_fts) AS bm25 "
            "FROM search_fts JOIN search_docs d ON d.id = search_fts.rowid "
            "WHERE search_fts MATCH ? AND d.agent_id = ? ORDER BY bm25, d.id LIMIT ?",
            (query, agent_id, limit),
        )
    except sqlite3.OperationalError as exc:  # only reachable through a bug in fts_query; say so plainly
        raise ValueError(f"search query could not be run: {exc}") from exc
    return [SearchRow(**dict(row)) for row in rows]
