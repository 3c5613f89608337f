"""Latent calls handed back to the calling model (seed 003): each waits for one answer from its own session."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from managed_tools.stores.db import Tx
from managed_tools.stores.errors import NotFoundError, PreconditionError
from managed_tools.stores.ids import canonical_json, utc_now, uuid7


class LatentCall(BaseModel):
    call_id: str
    tool_name: str
    span_id: str
    arguments: dict[str, Any]


async def open_call(tx: Tx, session_id: str, tool_name: str, span_id: str, arguments: dict[str, Any]) -> str:
    """Record a handed-back call; `span_id` ties it to the tool call's span events."""
    call_id = uuid7()
    await tx.execute(
        "INSERT INTO latent_calls (call_id, session_id, tool_name, span_id, arguments, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (call_id, session_id, tool_name, span_id, canonical_json(arguments), utc_now()),
    )
    return call_id


async def waiting(tx: Tx, session_id: str, call_id: str) -> LatentCall:
    """The call, if `session_id` made it and it has no answer yet. Another session's call reads as unknown, so
    call ids cannot be probed across sessions."""
    row = await tx.fetchone(
        "SELECT tool_name, span_id, arguments, output FROM latent_calls WHERE call_id = ? AND session_id = ?",
        (call_id, session_id),
    )
    if row is None:
        raise NotFoundError(f"No latent call {call_id[:64]!r} waits in this session.")
    if row["output"] is not None:
        raise PreconditionError(f"Latent call {call_id} already has its answer; it is recorded once.")
    return LatentCall(
        call_id=call_id, tool_name=row["tool_name"], span_id=row["span_id"], arguments=json.loads(row["arguments"])
    )


async def answer(tx: Tx, call_id: str, output: dict[str, Any]) -> None:
    await tx.execute(
        "UPDATE latent_calls SET output = ?, completed_at = ? WHERE call_id = ? AND output IS NULL",
        (canonical_json(output), utc_now(), call_id),
    )
