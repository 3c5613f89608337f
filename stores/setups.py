"""The agent setup contracts wakes ran under (content-addressed: one row per distinct setup of an agent), and what
each wake's tool results put into the conversation (sizes recorded on `span.completed`)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from managed_tools.stores.db import Tx
from managed_tools.stores.ids import utc_now


async def record_setup(tx: Tx, agent_id: str, fingerprint: str, contract: dict[str, Any]) -> None:
    """Keep the contract unless this agent already recorded the same setup."""
    await tx.execute(
        "INSERT OR IGNORE INTO agent_setups (agent_id, fingerprint, contract, recorded_at) VALUES (?, ?, ?, ?)",
        (agent_id, fingerprint, json.dumps(contract, separators=(",", ":"), ensure_ascii=False), utc_now()),
    )


class RecordedSetup(BaseModel):
    contract: dict[str, Any]
    recorded_at: str


async def get_setup(tx: Tx, agent_id: str, fingerprint: str) -> RecordedSetup | None:
    row = await tx.fetchone(
        "SELECT contract, recorded_at FROM agent_setups WHERE agent_id = ? AND fingerprint = ?", (agent_id, fingerprint)
    )
    return None if row is None else RecordedSetup(contract=json.loads(row["contract"]), recorded_at=row["recorded_at"])


class ResultSize(BaseModel):
    event_id: str
    tool_name: str
    created_at: str
    chars: int


class WakeResults(BaseModel):
    count: int
    chars: int
    largest: list[ResultSize]


_TOOL_RESULTS = (
    "FROM events WHERE wake_id = ? AND type = 'span.completed' AND json_extract(payload, '$.spanKind') = 'tool'"
)


async def wake_results(tx: Tx, wake_id: str, top: int) -> WakeResults:
    """How many tool results a wake returned, their total size, and the `top` largest (results recorded before
    sizes were kept count as empty)."""
    count, chars = await tx.fetchone(
        f"SELECT COUNT(*), COALESCE(SUM(json_extract(payload, '$.resultChars')), 0) {_TOOL_RESULTS}", (wake_id,)
    ) or (0, 0)
    rows = await tx.fetchall(
        "SELECT id, created_at, json_extract(payload, '$.toolName') AS tool, "
        f"json_extract(payload, '$.resultChars') AS chars {_TOOL_RESULTS} AND chars IS NOT NULL "
        "ORDER BY chars DESC, seq LIMIT ?",
        (wake_id, top),
    )
    largest = [
        ResultSize(event_id=r["id"], tool_name=r["tool"], created_at=r["created_at"], chars=r["chars"]) for r in rows
    ]
    return WakeResults(count=count, chars=chars, largest=largest)


async def wake_setup(tx: Tx, agent_id: str, wake_id: str) -> tuple[str | None, RecordedSetup | None]:
    """The setup fingerprint a wake ran under and its recorded contract (None for a wake recorded before
    contracts were kept)."""
    fingerprint = await tx.scalar("SELECT setup_fingerprint FROM wakes WHERE id = ?", (wake_id,))
    if fingerprint is None:
        return None, None
    return fingerprint, await get_setup(tx, agent_id, fingerprint)
