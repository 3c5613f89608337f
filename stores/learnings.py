"""Learnings: lessons, corrections and errors an agent records; promoted ones show in workspace memory.

A person can correct one (docs/memory-correct.md): supersede it by a newer learning, forget it, restore it. Each is a
row of learning_changes and a new `state`; nothing is deleted, so the history keeps what was hidden and why. Only
active learnings are in the search index and in workspace memory.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from managed_tools.stores import search, similar
from managed_tools.stores.db import Row, Tx, as_dict
from managed_tools.stores.errors import NotFoundError, PreconditionError
from managed_tools.stores.ids import utc_now, uuid7
from managed_tools.stores.provenance import Provenance

Kind = Literal["lesson", "correction", "error"]
State = Literal["active", "superseded", "forgotten"]
Action = Literal["supersede", "forget", "restore"]
COMPARED = 1000  # a new learning is compared with the agent's newest this many active ones


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
    state: State = "active"
    supersedes: str | None = None


class Change(BaseModel):
    """One change to a learning's state, kept for good."""

    id: str
    learning_id: str
    agent_id: str
    session_id: str | None
    action: Action
    replacement_id: str | None
    reason: str | None
    created_at: str


class Notice(BaseModel):
    """A learning already recorded that a new one repeats or contradicts (stores/similar.py)."""

    relation: Literal["duplicate", "contradiction"]
    learning_id: str
    title: str
    similarity: float


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
    supersedes: str | None = None,
    reason: str | None = None,
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
        supersedes=supersedes,
    )
    await insert(tx, learning)
    if supersedes is not None:  # checked there: a refusal rolls the insert back with the caller's transaction
        await change(
            tx, agent_id, supersedes, "supersede", session_id=session_id, replacement=learning.id, reason=reason
        )
    return learning


async def insert(tx: Tx, learning: Learning) -> None:
    """Store a learning as it is (a new one, or one a bundle carried in) and index it for search."""
    await tx.execute(
        "INSERT INTO learnings (id, agent_id, session_id, kind, title, detail, promote_to_memory, created_at, "
        "provenance, state, supersedes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            learning.state,
            learning.supersedes,
        ),
    )
    await _index(tx, learning)


async def _index(tx: Tx, learning: Learning) -> None:
    """Only an active learning is found by search (an empty body takes it out of the index)."""
    await search.upsert(
        tx,
        key=f"learning:{learning.id}",
        source="learning",
        agent_id=learning.agent_id,
        session_id=learning.session_id,
        title=f"{learning.kind}: {learning.title}",
        body=f"{learning.title}\n{learning.detail}" if learning.state == "active" else "",
    )


def from_row(row: Row) -> Learning:
    fields = {**as_dict(row), "promote_to_memory": bool(row["promote_to_memory"])}
    return Learning(**{**fields, "provenance": Provenance.from_json(row["provenance"])})


async def latest(
    tx: Tx, agent_id: str, limit: int, *, promoted_only: bool = False, hidden_too: bool = False
) -> list[Learning]:
    """The last `limit` learnings of the agent, oldest first; active ones only unless `hidden_too`."""
    where = (" AND promote_to_memory = 1" if promoted_only else "") + ("" if hidden_too else " AND state = 'active'")
    rows = await tx.fetchall(
        f"SELECT * FROM (SELECT * FROM learnings WHERE agent_id = ?{where} ORDER BY created_at DESC, id DESC "
        "LIMIT ?) AS l ORDER BY created_at, id",
        (agent_id, limit),
    )
    return [from_row(row) for row in rows]


async def hidden(tx: Tx, agent_id: str, *, promoted_only: bool = False) -> int:
    """How many of the agent's learnings are superseded or forgotten (what a default read leaves out)."""
    where = " AND promote_to_memory = 1" if promoted_only else ""
    return int(
        await tx.scalar(f"SELECT count(*) FROM learnings WHERE agent_id = ? AND state <> 'active'{where}", (agent_id,))
    )


async def get(tx: Tx, agent_id: str, learning_id: str) -> Learning:
    row = await tx.fetchone("SELECT * FROM learnings WHERE id = ? AND agent_id = ?", (learning_id, agent_id))
    if row is None:
        raise NotFoundError(f"No learning {learning_id} of agent {agent_id} (learning_list includeHidden lists all).")
    return from_row(row)


STATE_AFTER: dict[Action, State] = {"supersede": "superseded", "forget": "forgotten", "restore": "active"}


async def changeable(tx: Tx, agent_id: str, learning_id: str, action: Action) -> Learning:
    """The learning, if `action` can be done to it: restore only a hidden one, supersede or forget an active one."""
    item = await get(tx, agent_id, learning_id)
    if (action == "restore") == (item.state == "active"):
        said = "is active already" if action == "restore" else f"is {item.state} already; restore it first"
        raise PreconditionError(f"learning {learning_id} {said}.")
    return item


async def change(
    tx: Tx,
    agent_id: str,
    learning_id: str,
    action: Action,
    *,
    session_id: str | None,
    replacement: str | None = None,
    reason: str | None = None,
) -> Change:
    """Supersede, forget or restore a learning: its new state and a change row, in the caller's transaction."""
    item = await changeable(tx, agent_id, learning_id, action)
    state = STATE_AFTER[action]
    entry = Change(
        id=uuid7(),
        learning_id=learning_id,
        agent_id=agent_id,
        session_id=session_id,
        action=action,
        replacement_id=replacement,
        reason=reason,
        created_at=utc_now(),
    )
    await insert_change(tx, entry)
    await tx.execute("UPDATE learnings SET state = ? WHERE id = ?", (state, learning_id))
    await _index(tx, item.model_copy(update={"state": state}))
    return entry


async def insert_change(tx: Tx, entry: Change) -> None:
    await tx.execute(
        "INSERT INTO learning_changes (id, learning_id, agent_id, session_id, action, replacement_id, reason, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (entry.id, entry.learning_id, entry.agent_id, entry.session_id, entry.action, entry.replacement_id,
         entry.reason, entry.created_at),
    )  # fmt: skip


def change_from_row(row: Row) -> Change:
    return Change(**as_dict(row))


async def history(tx: Tx, learning_id: str) -> list[Change]:
    """A learning's changes, oldest first."""
    rows = await tx.fetchall(
        "SELECT * FROM learning_changes WHERE learning_id = ? ORDER BY created_at, id", (learning_id,)
    )
    return [change_from_row(row) for row in rows]


async def notices(tx: Tx, agent_id: str, title: str, detail: str, *, skip: str | None = None) -> list[Notice]:
    """The agent's active learnings (its newest COMPARED) that a new one with this title and detail repeats or
    contradicts, most alike first."""
    new = similar.reading(f"{title}\n{detail}")
    found: list[Notice] = []
    for item in await latest(tx, agent_id, COMPARED):
        if item.id == skip:
            continue
        if (seen := similar.relation(new, similar.reading(f"{item.title}\n{item.detail}"))) is not None:
            found.append(Notice(relation=seen[0], learning_id=item.id, title=item.title, similarity=round(seen[1], 2)))
    return sorted(found, key=lambda n: -n.similarity)[:5]
