"""The memory stores and the outcome evaluation as resources a client can show to a person (read-only)."""

from __future__ import annotations

import json

from pydantic import BaseModel

from stores.errors import NotFoundError
from tools.context import ToolContext
from tools.memory_tools import STORES, render
from tools.outcome_tools import posture
from tools.scope import scoped_session
from tools.uris import AGENT_TARGETS, SCHEME, SESSION_TARGETS, evaluation_uri, memory_uri, parse

MIME = {"markdown": "text/markdown", "json": "application/json"}


class Resource(BaseModel):
    uri: str
    name: str
    title: str
    description: str
    mime_type: str


class Template(BaseModel):
    uri_template: str
    name: str
    description: str
    mime_type: str | None


def listing(session_id: str) -> list[Resource]:
    """The current session's stores and evaluation, and the agent's shared memory."""
    found = [
        Resource(
            uri=memory_uri(target, session_id),
            name=target,
            title=STORES[target].title,
            description=STORES[target].description,
            mime_type=MIME[STORES[target].format],
        )
        for target in (*SESSION_TARGETS, *AGENT_TARGETS)
    ]
    found.append(
        Resource(
            uri=evaluation_uri(session_id),
            name="outcome_evaluation",
            title="Outcome evaluation",
            description="The session's outcome, its current evaluation and the next step.",
            mime_type="application/json",
        )
    )
    return found


TEMPLATES = [
    Template(
        uri_template=f"{SCHEME}://sessions/{{sessionId}}/memory/{{target}}",
        name="session_memory",
        description="A memory store of another session of this agent: " + ", ".join(SESSION_TARGETS) + ".",
        mime_type=None,
    ),
    Template(
        uri_template=f"{SCHEME}://sessions/{{sessionId}}/outcome/evaluation",
        name="session_outcome_evaluation",
        description="The outcome evaluation of another session of this agent.",
        mime_type="application/json",
    ),
]


async def read(ctx: ToolContext, uri: str) -> tuple[str, str]:
    """(mime type, text) of one of our resources; another agent's session is refused like in the tools."""
    parsed = parse(uri)
    if parsed is None:
        raise NotFoundError(f"No resource {uri}; resources/list shows what there is.")
    session_id, target = parsed
    session = await scoped_session(ctx, session_id)
    if target == "evaluation":
        state = await posture(ctx, session.id)
        return "application/json", json.dumps(state.model_dump(mode="json", by_alias=True), indent=2)
    content, _, _ = await render(ctx, target, session.id)
    return MIME[STORES[target].format], content
