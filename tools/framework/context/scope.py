"""Which sessions a tool may reach, and how two sessions of one agent are related."""

from __future__ import annotations

from typing import Literal
from weakref import WeakKeyDictionary

from managed_tools.stores import sessions
from managed_tools.stores.db import Database
from managed_tools.stores.sessions import SessionRecord
from managed_tools.tools.framework.context.context import ToolContext

Relation = Literal["parent", "child", "sibling"]
Lineage = Literal["related", "parent", "children", "siblings"]


async def scoped_session(ctx: ToolContext, session_id: str | None) -> SessionRecord:
    """The session a tool may reach: the current one by default, else one of the same agent and principal."""
    return await sessions.get_agent_session(ctx.tx, session_id or ctx.session_id, ctx.agent_id, owner=ctx.owner)


# The sessions found to be an agent's and a principal's, per database. A session's agent and owner never change and
# no session is deleted, so a session once found to be the caller's stays the caller's: the check reads the store
# once per session, not once per call (docs/decisions/session-check-once.md).
_CHECKED: WeakKeyDictionary[Database, set[tuple[str, str, str]]] = WeakKeyDictionary()
MAX_CHECKED = 4096


async def scoped_session_id(ctx: ToolContext, session_id: str | None) -> str:
    """The id of the session a tool may reach, checked as `scoped_session` checks it, for a tool that needs only
    the id. A check made in a write transaction counts once it commits (a session that transaction created would
    be gone with a rollback)."""
    wanted = session_id or ctx.session_id
    key = (wanted, ctx.agent_id, ctx.owner)
    checked = _CHECKED.setdefault(ctx.runtime.db, set())
    if key in checked:
        return wanted
    await scoped_session(ctx, wanted)
    if ctx.tx.writing:
        ctx.tx.on_commit(lambda: _remember(checked, key))
    else:
        _remember(checked, key)
    return wanted


def _remember(checked: set[tuple[str, str, str]], key: tuple[str, str, str]) -> None:
    if len(checked) >= MAX_CHECKED:  # bounded: a server reaching many sessions checks them again, nothing worse
        checked.clear()
    checked.add(key)


def relation(current: SessionRecord, other: SessionRecord) -> Relation | None:
    if other.id == current.id:
        return None
    if current.parent_id is not None and other.id == current.parent_id:
        return "parent"
    if other.parent_id == current.id:
        return "child"
    if current.parent_id is not None and other.parent_id == current.parent_id:
        return "sibling"
    return None


LINEAGE_RELATIONS: dict[Lineage, frozenset[Relation]] = {
    "related": frozenset({"parent", "child", "sibling"}),
    "parent": frozenset({"parent"}),
    "children": frozenset({"child"}),
    "siblings": frozenset({"sibling"}),
}


def in_lineage(lineage: Lineage | None, rel: Relation | None) -> bool:
    """Does a session related to the current one as `rel` pass a `lineage` filter (None passes all)?"""
    return lineage is None or rel in LINEAGE_RELATIONS[lineage]
