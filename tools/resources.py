"""The memory stores and the outcome evaluation as resources a client can show to a person (read-only)."""

from __future__ import annotations

import base64
import json
import mimetypes

import anyio
from pydantic import BaseModel

from managed_tools.stores import ripgrep
from managed_tools.stores.errors import NotFoundError
from managed_tools.stores.files import read_limited
from managed_tools.tools.context import ToolContext
from managed_tools.tools.memory.tools import STORES, render
from managed_tools.tools.outcomes.gate import posture
from managed_tools.tools.scope import scoped_session
from managed_tools.tools.uris import (
    AGENT_TARGETS,
    FILE_MOUNTS,
    SCHEME,
    SESSION_TARGETS,
    evaluation_uri,
    file_uri,
    memory_uri,
    parse,
    parse_file,
)

MIME = {"markdown": "text/markdown", "json": "application/json"}
MAX_LISTED_FILES = 500  # per mount; the templates reach every other file
MAX_FILE_BYTES = 5 << 20


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


async def file_listing(ctx: ToolContext) -> list[Resource]:
    """Files of the substrate and the workspace (honouring .gitignore), at most MAX_LISTED_FILES per mount."""
    found: list[Resource] = []
    private = ctx.runtime.guard.private
    for mount_path in (FILE_MOUNTS["agent"], FILE_MOUNTS["workspace"]):
        resolved = ctx.runtime.guard.resolve(mount_path, "list")
        names, _ = await ripgrep.list_files(resolved.host, [] if mount_path.endswith("agent") else private,
                                            MAX_LISTED_FILES, confine=ctx.runtime.confinement.read_only)  # fmt: skip
        for name in names:
            uri = file_uri(mount_path, name)
            assert uri is not None
            found.append(
                Resource(
                    uri=uri,
                    name=f"{mount_path}/{name}",
                    title=name,
                    description=f"A file in {mount_path}.",
                    mime_type=mimetypes.guess_type(name)[0] or "text/plain",
                )
            )
    return found


async def read_file(ctx: ToolContext, virtual: str) -> tuple[str, str | None, bytes | None]:
    """(mime type, text, or bytes for a binary file) of a workspace or substrate file, through the path guard."""
    resolved = ctx.runtime.guard.resolve(virtual, "read")
    if not resolved.exists:
        raise NotFoundError(f"No file {resolved.virtual}.")
    data, more = await anyio.to_thread.run_sync(read_limited, resolved, MAX_FILE_BYTES)
    if more:
        raise NotFoundError(f"{resolved.virtual} is over {MAX_FILE_BYTES} bytes; read it with the read tool.")
    mime = mimetypes.guess_type(resolved.name)[0] or "application/octet-stream"
    if b"\x00" not in data[:8192]:
        try:
            return (mime if mime.startswith("text/") or "json" in mime else "text/plain"), data.decode(), None
        except UnicodeDecodeError:
            pass
    return mime, None, data


def blob(data: bytes) -> str:
    return base64.b64encode(data).decode()


TEMPLATES = [
    Template(
        uri_template=f"{SCHEME}://files/workspace/{{+path}}",
        name="workspace_file",
        description="A file of the workspace (/workspace).",
        mime_type=None,
    ),
    Template(
        uri_template=f"{SCHEME}://files/agent/{{+path}}",
        name="substrate_file",
        description="A file of the agent's shared substrate (/workspace/agent).",
        mime_type=None,
    ),
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
    if parse_file(uri) is not None:
        raise NotFoundError(f"{uri} is a file: read it with read_file.")
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
