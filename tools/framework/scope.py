"""Which sessions a tool may reach, and how two sessions of one agent are related."""

from __future__ import annotations

from typing import Literal

from managed_tools.stores import sessions
from managed_tools.stores.sessions import SessionRecord
from managed_tools.tools.framework.context import ToolContext

Relation = Literal["parent", "child", "sibling"]
Lineage = Literal["related", "parent", "children", "siblings"]


async def scoped_session(ctx: ToolContext, session_id: str | None) -> SessionRecord:
    """The session a tool may reach: the current one by default, else one of the same agent and principal."""
    return await sessions.get_agent_session(ctx.tx, session_id or ctx.session_id, ctx.agent_id, owner=ctx.owner)


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
