"""The memory stores, the outcome evaluation, the other session artifacts (outcome history, permission posture,
shell history and last output, staging manifest, agent setup), the files and the attachments as resources a client
can show to a person (read-only)."""

from __future__ import annotations

import base64
import dataclasses
import json
import mimetypes

import anyio
from pydantic import BaseModel

from managed_tools.sandbox import ripgrep
from managed_tools.sandbox.files import read_limited
from managed_tools.stores import attachments
from managed_tools.stores.errors import NotFoundError
from managed_tools.tools.framework.calls.call_result import CallResult
from managed_tools.tools.framework.context.attachments import read_owned
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import scoped_session
from managed_tools.tools.framework.context.uris import (
    AGENT_TARGETS,
    FILE_MOUNTS,
    SCHEME,
    SESSION_TARGETS,
    VIEWS,
    View,
    attachment_uri,
    evaluation_uri,
    file_uri,
    memory_uri,
    parse,
    parse_file,
    view_uri,
)
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.registry import Registry

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


def served_views(registry: Registry) -> dict[str, View]:
    """The session views whose tool this server serves: a hidden tool has no view either."""
    return {name: view for name, view in VIEWS.items() if view.tool in registry}


def listing(session_id: str, registry: Registry) -> list[Resource]:
    """The current session's stores and evaluation, the agent's shared memory, and the views served."""
    # The memory family's code (and the outcome gate below it) is imported when first used, not at start-up.
    from managed_tools.tools.memory.targets import STORES

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
    found.extend(
        Resource(uri=view_uri(name, session_id), name=name, title=view.title, description=view.description,
                 mime_type="application/json")
        for name, view in served_views(registry).items()
    )  # fmt: skip
    return found


async def _view(ctx: ToolContext, name: str, session_id: str) -> str:
    """The view's tool run on `session_id` (already scoped): given as its sessionId, or, for a tool that only
    reads the current session, as the context's session."""
    definition = ctx.runtime.registry.get(VIEWS[name].tool)
    assert definition is not None and definition.handler is not None
    if "session_id" in definition.input_model.model_fields:
        args = definition.input_model.model_validate({"sessionId": session_id})
    else:
        args = definition.input_model.model_validate({})
        ctx = dataclasses.replace(ctx, attachment=dataclasses.replace(ctx.attachment, session_id=session_id))
    output = await definition.handler(ctx, args)
    return json.dumps(output.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False)


# Which calls change which session artifacts, beyond the resources a handler marks itself (`ctx.touched`).
SHELL_VIEWS = ("shell_history", "shell_last_output", "permission_posture")
SHELL_STATE_TOOLS = frozenset({"shell_wait", "shell_set_cwd", "shell_set_env", "shell_unset_env"})


def affected(definition: ToolDefinition | None, session_id: str, result: CallResult) -> list[str]:
    """The resources to notify after a call: those it marked, and the session artifacts derived from them.

    The outcome history and the permission posture follow the evaluation; running a program or changing the
    persistent shell changes the shell artifacts and the posture's shell part; a call that asked a person (or is
    waiting for one) changes the open requests; a call that may have written a file can change a draft's status."""
    touched = set(result.touched)
    views: set[str] = set()
    if evaluation_uri(session_id) in touched:
        views |= {"outcome_history", "permission_posture"}
    if definition is not None:
        if "sandbox_execute" in definition.effects or definition.name in SHELL_STATE_TOOLS:
            views.update(SHELL_VIEWS)
            touched.add(memory_uri("shell_state", session_id))
        if definition.permission_policy == "always_ask" or definition.asks_when is not None:
            views.add("permission_posture")
        if "resource_write" in definition.effects:
            views.add("staging_manifest")
    if result.status == "blocked":
        views.add("permission_posture")
    if any(parse_file(uri) is not None for uri in touched):
        views.add("staging_manifest")
    return sorted(touched | {view_uri(view, session_id) for view in views})


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


async def attachment_listing(ctx: ToolContext) -> list[Resource]:
    """The current session's attachments."""
    return [
        Resource(uri=attachment_uri(r.session_id, r.id), name=f"attachment_{r.id}", title=r.name,
                 description=f"A file a tool attached ({r.size} bytes).", mime_type=r.mime_type)
        for r in await attachments.of_session(ctx.tx, ctx.session_id)
    ]  # fmt: skip


async def read_attachment(ctx: ToolContext, session_id: str, attachment_id: str) -> tuple[str, bytes]:
    """(mime type, bytes) of an attachment of one of this agent's sessions; the file must still be what was
    stored."""
    record, data = await read_owned(ctx.runtime, ctx.tx, session_id, attachment_id, owner=ctx.owner)
    return record.mime_type, data


def blob(data: bytes) -> str:
    return base64.b64encode(data).decode()


def templates(registry: Registry) -> list[Template]:
    """The templates reaching other sessions' resources and every file, views of the served tools only."""
    return [*FIXED_TEMPLATES, *(
        Template(
            uri_template=view_uri(name, "{sessionId}"),
            name=f"session_{name}",
            description=f"{view.title} of another session of this agent.",
            mime_type="application/json",
        )
        for name, view in served_views(registry).items()
    ), ATTACHMENT_TEMPLATE]  # fmt: skip


ATTACHMENT_TEMPLATE = Template(
    uri_template=attachment_uri("{sessionId}", "{attachmentId}"),
    name="attachment",
    description="A file or image a tool attached in a session of this agent (an AttachmentRef's uri).",
    mime_type=None,
)


FIXED_TEMPLATES = [
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
    from managed_tools.tools.memory.targets import STORES, render  # as in `listing`
    from managed_tools.tools.outcomes.gate import posture

    if target == "evaluation":
        state = await posture(ctx, session.id)
        return "application/json", json.dumps(state.model_dump(mode="json", by_alias=True), indent=2)
    if target in VIEWS:
        if target not in served_views(ctx.runtime.registry):
            raise NotFoundError(f"No resource {uri}; resources/list shows what there is.")
        return "application/json", await _view(ctx, target, session.id)
    content = (await render(ctx, target, session.id)).content
    return MIME[STORES[target].format], content
