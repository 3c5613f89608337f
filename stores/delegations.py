"""How each child session was delegated (seed 000 §4-6): its display name (a `name:` tag in listings), whether it
takes further messages once it has answered (`resumable`), and whether its completion is queued to its parent
(`implicit`) or only read when asked (`explicit`)."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel

from managed_tools.stores.db import Tx, as_dict
from managed_tools.stores.ids import utc_now

ParentCommunication = Literal["implicit", "explicit"]
# The tools a parent narrowed its child's model to: the child's first event of this type, written with the child
# in the delegating transaction (an event a later call could add is never the first, so it cannot widen them).
TOOLS_EVENT = "delegation.tools"


class Delegation(BaseModel):
    child_session_id: str
    parent_session_id: str
    name: str
    resumable: bool
    parent_communication: ParentCommunication
    created_at: str


async def record(
    tx: Tx, child_id: str, parent_id: str, *, name: str, resumable: bool, parent_communication: ParentCommunication
) -> Delegation:
    made = Delegation(
        child_session_id=child_id,
        parent_session_id=parent_id,
        name=name,
        resumable=resumable,
        parent_communication=parent_communication,
        created_at=utc_now(),
    )
    await tx.execute(
        "INSERT INTO delegations (child_session_id, parent_session_id, name, resumable, parent_communication, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?)",
        (child_id, parent_id, name, int(resumable), parent_communication, made.created_at),
    )
    return made


async def get(tx: Tx, child_id: str) -> Delegation | None:
    row = await tx.fetchone("SELECT * FROM delegations WHERE child_session_id = ?", (child_id,))
    return None if row is None else Delegation(**as_dict(row))


async def names(tx: Tx, session_ids: Collection[str]) -> dict[str, str]:
    """The delegated name of each of these sessions that has one."""
    if not session_ids:
        return {}
    marks = ", ".join("?" * len(session_ids))
    rows = await tx.fetchall(
        f"SELECT child_session_id, name FROM delegations WHERE child_session_id IN ({marks})", list(session_ids)
    )
    return {str(row["child_session_id"]): str(row["name"]) for row in rows}


async def unfinished_children(tx: Tx, parent_id: str) -> int:
    """The parent's children not terminated: what a delegation's `maxInstances` counts."""
    return int(
        await tx.scalar(
            "SELECT COUNT(*) FROM sessions WHERE parent_id = ? AND status != 'terminated'",
            (parent_id,),
        )
    )


async def narrowed_tools(tx: Tx, child_id: str) -> frozenset[str] | None:
    """The tools the session's model may be sent and call, when its parent narrowed them; None: not narrowed."""
    payload = await tx.scalar(
        "SELECT payload FROM events WHERE session_id = ? AND type = ? ORDER BY seq LIMIT 1", (child_id, TOOLS_EVENT)
    )
    return None if payload is None else frozenset(json.loads(str(payload))["tools"])
