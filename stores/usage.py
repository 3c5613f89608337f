"""What each session has used: its recorded calls, their tokens and their time (tools/framework/budget.py says
what counts). One row per session, added to as each call's completion is recorded, so a budget holds across
connections and processes."""

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


async def add(tx: Tx, session_id: str, *, tokens: int, duration_ms: float) -> None:
    """One more call of the session, with its tokens and time."""
    await tx.execute(
        "INSERT INTO session_usage (session_id, calls, tokens, duration_ms, updated_at) VALUES (?, 1, ?, ?, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET calls = session_usage.calls + 1, "
        "tokens = session_usage.tokens + excluded.tokens, "
        "duration_ms = session_usage.duration_ms + excluded.duration_ms, updated_at = excluded.updated_at",
        (session_id, tokens, duration_ms, utc_now()),
    )
