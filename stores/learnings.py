"""Learnings: lessons, corrections and errors an agent records; promoted ones show in workspace memory."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from managed_tools.stores import search
from managed_tools.stores.db import Tx, as_dict
from managed_tools.stores.ids import utc_now, uuid7

Kind = Literal["lesson", "correction", "error"]


class Learning(BaseModel):
    id: str
    agent_id: str
    session_id: str | None
    kind: Kind
    title: str
    detail: str
    promote_to_memory: bool
    created_at: str


async def record(
    tx: Tx, *, agent_id: str, session_id: str | None, kind: Kind, title: str, detail: str, promote: bool
) -> Learning:
    learning = Learning(
        id=uuid7(),
        agent_id=agent_id,
        session_id=session_id,
        kind=kind,
        title=title,
        detail=detail,
        promote_to_memory=promote,
        created_at=utc_now(),
    )
    await tx.execute(
        "INSERT INTO learnings (id, agent_id, session_id, kind, title, detail, promote_to_memory, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (learning.id, agent_id, session_id, kind, title, detail, int(promote), learning.created_at),
    )
    await search.upsert(
        tx,
        key=f"learning:{learning.id}",
        source="learning",
        agent_id=agent_id,
        session_id=session_id,
        title=f"{kind}: {title}",
        body=f"{title}\n{detail}",
    )
    return learning


async def latest(tx: Tx, agent_id: str, limit: int, *, promoted_only: bool = False) -> list[Learning]:
    """The last `limit` learnings of the agent, oldest first."""
    where = " AND promote_to_memory = 1" if promoted_only else ""
    rows = await tx.fetchall(
        f"SELECT * FROM (SELECT * FROM learnings WHERE agent_id = ?{where} ORDER BY created_at DESC, id DESC "
        "LIMIT ?) AS l ORDER BY created_at, id",
        (agent_id, limit),
    )
    return [Learning(**{**as_dict(row), "promote_to_memory": bool(row["promote_to_memory"])}) for row in rows]
