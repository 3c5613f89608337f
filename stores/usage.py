"""What each session has used: its recorded calls, their tokens and their time (tools/framework/context/budget.py says
what counts). One row per session, added to as each call's completion is recorded, so a budget holds across
connections and processes. A call is added to its session and to every ancestor (the sessions that delegated it,
up the chain), so a session's use includes its children's and a child cannot spend a budget of its own."""

from __future__ import annotations

from pydantic import BaseModel

from managed_tools.stores.db import Tx
from managed_tools.stores.ids import utc_now


class Usage(BaseModel):
    calls: int = 0
    tokens: int = 0
    seconds: float = 0.0


async def read(tx: Tx, session_id: str) -> Usage:
    row = await tx.fetchone("SELECT calls, tokens, duration_ms FROM session_usage WHERE session_id = ?", (session_id,))
    if row is None:
        return Usage()
    return Usage(calls=row["calls"], tokens=row["tokens"], seconds=float(row["duration_ms"]) / 1000)


MAX_DEPTH = 64  # ancestors followed at most (delegation makes no cycle; this bounds a damaged chain)
# The session and its ancestors, nearest first.
CHAIN = (
    "WITH RECURSIVE chain(id, depth) AS (SELECT CAST(? AS TEXT), 0 UNION ALL SELECT s.parent_id, c.depth + 1 "
    f"FROM sessions s JOIN chain c ON s.id = c.id WHERE s.parent_id IS NOT NULL AND c.depth < {MAX_DEPTH}) "
)


async def read_limiting(tx: Tx, session_id: str) -> tuple[Usage, bool]:
    """The use a per-session budget is checked against: the largest along the session and its ancestors (each
    holds its descendants' calls), and whether the session has an ancestor (its calls count against theirs)."""
    row = await tx.fetchone(
        CHAIN + "SELECT MAX(u.calls) AS calls, MAX(u.tokens) AS tokens, MAX(u.duration_ms) AS duration_ms, "
        "MAX(c.depth) AS depth FROM chain c LEFT JOIN session_usage u ON u.session_id = c.id",
        (session_id,),
    )
    if row is None or row["calls"] is None:
        return Usage(), bool(row is not None and row["depth"])
    used = Usage(calls=row["calls"], tokens=row["tokens"], seconds=float(row["duration_ms"]) / 1000)
    return used, bool(row["depth"])


async def add(tx: Tx, session_id: str, *, tokens: int, duration_ms: float) -> None:
    """One more call of the session, with its tokens and time, added to it and to each of its ancestors."""
    await tx.execute(
        CHAIN + "INSERT INTO session_usage (session_id, calls, tokens, duration_ms, updated_at) "
        "SELECT id, 1, ?, ?, ? FROM chain WHERE true "
        "ON CONFLICT (session_id) DO UPDATE SET calls = session_usage.calls + 1, "
        "tokens = session_usage.tokens + excluded.tokens, "
        "duration_ms = session_usage.duration_ms + excluded.duration_ms, updated_at = excluded.updated_at",
        (session_id, tokens, duration_ms, utc_now()),
    )
