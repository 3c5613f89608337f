"""Learnings: lessons, corrections and errors an agent records; promoted ones show in workspace memory."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from managed_tools.stores import search
from managed_tools.stores.db import Row, Tx, as_dict
from managed_tools.stores.ids import utc_now, uuid7
from managed_tools.stores.provenance import Provenance

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
    provenance: Provenance = Provenance()


async def record(
    tx: Tx,
    *,
    agent_id: str,
    session_id: str | None,
    kind: Kind,
    title: str,
    detail: str,
    promote: bool,
    provenance: Provenance = Provenance(),  # noqa: B008 (frozen: one shared empty value is safe)
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
        provenance=provenance,
    )
    await insert(tx, learning)
    return learning


async def insert(tx: Tx, learning: Learning) -> None:
    """Store a learning as it is (a new one, or one a bundle carried in) and index it for search."""
    await tx.execute(
        "INSERT INTO learnings (id, agent_id, session_id, kind, title, detail, promote_to_memory, created_at, "
        "provenance) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            learning.id,
            learning.agent_id,
            learning.session_id,
            learning.kind,
            learning.title,
            learning.detail,
            int(learning.promote_to_memory),
            learning.created_at,
            learning.provenance.to_json(),
        ),
    )
    await search.upsert(
        tx,
        key=f"learning:{learning.id}",
        source="learning",
        agent_id=learning.agent_id,
        session_id=learning.session_id,
        title=f"{learning.kind}: {learning.title}",
        body=f"{learning.title}\n{learning.detail}",
    )


def from_row(row: Row) -> Learning:
    fields = {**as_dict(row), "promote_to_memory": bool(row["promote_to_memory"])}
    return Learning(**{**fields, "provenance": Provenance.from_json(row["provenance"])})


async def latest(tx: Tx, agent_id: str, limit: int, *, promoted_only: bool = False) -> list[Learning]:
    """The last `limit` learnings of the agent, oldest first."""
    where = " AND promote_to_memory = 1" if promoted_only else ""
    rows = await tx.fetchall(
        f"SELECT * FROM (SELECT * FROM learnings WHERE agent_id = ?{where} ORDER BY created_at DESC, id DESC "
        "LIMIT ?) AS l ORDER BY created_at, id",
        (agent_id, limit),
    )
    return [from_row(row) for row in rows]
