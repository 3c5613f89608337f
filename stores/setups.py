"""The agent setup contracts wakes ran under (content-addressed: one row per distinct setup of an agent), and what
each wake's tool results put into the conversation (sizes recorded on `span.completed`)."""

from __future__ import annotations

from pydantic import BaseModel

from managed_tools.stores.db import Tx
from managed_tools.stores.ids import utc_now


async def record_setup(tx: Tx, agent_id: str, fingerprint: str, contract: str) -> None:
    """Keep the contract (JSON) unless this agent already recorded the same setup."""
    await tx.execute(
        "INSERT INTO agent_setups (agent_id, fingerprint, contract, recorded_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        (agent_id, fingerprint, contract, utc_now()),
    )


class RecordedSetup(BaseModel):
    fingerprint: str
    contract: str
    recorded_at: str


async def get_setup(tx: Tx, agent_id: str, fingerprint: str) -> RecordedSetup | None:
    row = await tx.fetchone(
        "SELECT contract, recorded_at FROM agent_setups WHERE agent_id = ? AND fingerprint = ?", (agent_id, fingerprint)
    )
    if row is None:
        return None
    return RecordedSetup(fingerprint=fingerprint, contract=row["contract"], recorded_at=row["recorded_at"])


class ResultSize(BaseModel):
    event_id: str
    tool_name: str
    created_at: str
    chars: int


class WakeResults(BaseModel):
    count: int
    chars: int
    largest: list[ResultSize]


async def wake_results(tx: Tx, wake_id: str, top: int) -> WakeResults:
    """How many tool results a wake returned, their total size, and the `top` largest."""
    # The same expression as the index events_result_chars, so it answers both queries: results of older servers
    # (no recorded size) are left out.
    chars = tx.dialect.json_int("payload", "resultChars")
    results = f"FROM events WHERE wake_id = ? AND type = 'span.completed' AND {chars} IS NOT NULL"
    totals = await tx.fetchone(f"SELECT COUNT(*) AS n, COALESCE(SUM({chars}), 0) AS chars {results}", (wake_id,))
    rows = await tx.fetchall(
        f"SELECT id, created_at, {tx.dialect.json_text('payload', 'toolName')} AS tool, {chars} AS chars "
        f"{results} ORDER BY {chars} DESC, seq LIMIT ?",
        (wake_id, top),
    )
    largest = [
        ResultSize(event_id=r["id"], tool_name=r["tool"], created_at=r["created_at"], chars=r["chars"]) for r in rows
    ]
    return WakeResults(count=totals["n"] if totals else 0, chars=int(totals["chars"]) if totals else 0, largest=largest)


async def wake_setup(tx: Tx, agent_id: str, wake_id: str) -> tuple[str | None, RecordedSetup | None]:
    """The setup fingerprint a wake ran under and its recorded contract (None for a wake recorded before
    contracts were kept)."""
    fingerprint = await tx.scalar("SELECT setup_fingerprint FROM wakes WHERE id = ?", (wake_id,))
    if fingerprint is None:
        return None, None
    return fingerprint, await get_setup(tx, agent_id, fingerprint)
