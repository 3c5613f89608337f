"""Writing memory: memory_write to the session's stores, memory_promote_note to the agent's shared notes (a person
approves each, gated on a passing outcome); every write is a version that keeps its sources."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from managed_tools.stores import memory
from managed_tools.stores.provenance import Provenance, Trust
from managed_tools.tools.framework.context import provenance
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import scoped_session_id
from managed_tools.tools.framework.context.uris import memory_uri
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import (
    Arguments,
    ExpectedContentHash,
    ExpectedVersionId,
    RequireOutcomePass,
    SessionId,
    WireModel,
)
from managed_tools.tools.memory.targets import DEFAULT_READ_CHARS, MAX_CONTENT_CHARS, STORES, WritableTarget, scope_of
from managed_tools.tools.outcomes.gate import Evaluation, enforce_gate

Content = Annotated[str, Field(max_length=MAX_CONTENT_CHARS)]


async def _sources(
    ctx: ToolContext, target: str, session_id: str, mode: Literal["replace", "append"], tool: str
) -> Provenance:
    """A write's sources: the calling session's, and on an append those of the content appended to (the new
    content is made of both)."""
    own = await provenance.of_session(ctx, tool)
    if mode == "replace":
        return own
    current = await memory.read(ctx.tx, scope_of(ctx, target, session_id), target)
    return (await memory.provenance_of(ctx.tx, current.version_id)).merged(own)


class WriteOutput(WireModel):
    session_id: str
    target: str
    mode: Literal["replace", "append"]
    uri: str
    version_id: str
    previous_version_id: str | None
    content_hash: str
    size_bytes: int
    content: str
    content_truncated: bool
    trust: Trust


async def _write(
    ctx: ToolContext,
    *,
    target: str,
    session_id: str,
    content: str,
    mode: Literal["replace", "append"],
    source: str,
    sources: Provenance,
    expected_version_id: str | None,
    expected_content_hash: str | None,
) -> WriteOutput:
    if not content.strip():
        raise ToolError(f"{source} requires a non-empty content.")
    owner = session_id if STORES[target].scope == "session" else None  # an agent's store is no session's
    version, previous, new_content = await memory.write(
        ctx.tx,
        scope=scope_of(ctx, target, session_id),
        target=target,
        agent_id=ctx.agent_id,
        session_id=owner,
        wake_id=ctx.wake_id,
        content=content,
        mode=mode,
        source=source,
        provenance=sources,
        expected_version_id=expected_version_id,
        expected_content_hash=expected_content_hash,
        searchable_title=memory.searchable_title(target, owner),
    )
    uri = memory_uri(target, session_id)
    ctx.touched.update(
        {uri, memory_uri("workspace_memory", session_id)} if target == "workspace_memory_notes" else {uri}
    )
    return WriteOutput(
        session_id=session_id,
        target=target,
        mode=mode,
        uri=uri,
        version_id=version.id,
        previous_version_id=previous,
        content_hash=version.content_hash,
        size_bytes=version.size_bytes,
        content=new_content[:DEFAULT_READ_CHARS],
        content_truncated=len(new_content) > DEFAULT_READ_CHARS,
        trust=version.provenance.trust,
    )


class WriteArgs(Arguments):
    target: WritableTarget
    content: Content
    mode: Literal["replace", "append"] = "replace"
    expected_version_id: ExpectedVersionId = None
    expected_content_hash: ExpectedContentHash = None
    session_id: SessionId | None = None


async def memory_write(ctx: ToolContext, args: WriteArgs) -> WriteOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    return await _write(
        ctx,
        target=args.target,
        session_id=session_id,
        content=args.content,
        mode=args.mode,
        source="memory_write",
        sources=await _sources(ctx, args.target, session_id, args.mode, "memory_write"),
        expected_version_id=args.expected_version_id,
        expected_content_hash=args.expected_content_hash,
    )


class PromoteArgs(Arguments):
    content: Content
    mode: Literal["replace", "append"] = "replace"
    require_outcome_pass: RequireOutcomePass = None
    expected_version_id: ExpectedVersionId = None
    expected_content_hash: ExpectedContentHash = None


class PromoteOutput(WriteOutput):
    outcome_evaluation: Evaluation | None


async def promote_gate(ctx: ToolContext, args: PromoteArgs) -> None:
    await enforce_gate(ctx, "memory_promote_note", args.require_outcome_pass)


async def _promoted_sources(ctx: ToolContext, args: PromoteArgs) -> Provenance:
    return await _sources(ctx, "workspace_memory_notes", ctx.session_id, args.mode, "memory_promote_note")


async def promote_untrusted(ctx: ToolContext, args: PromoteArgs) -> str | None:
    return provenance.untrusted_reason(await _promoted_sources(ctx, args))


async def promote_preview(ctx: ToolContext, args: PromoteArgs) -> str:
    current = (await memory.read(ctx.tx, memory.agent_scope(ctx.agent_id), "workspace_memory_notes")).content
    after = memory.combine(current, args.content, args.mode)
    return (
        f"This {args.mode}s the notes shared by every session of agent {ctx.agent_id} "
        f"({len(current)} → {len(after)} characters). Provenance: "
        f"{provenance.described(await _promoted_sources(ctx, args))}. New notes begin:\n{after[:600]}"
    )


async def memory_promote_note(ctx: ToolContext, args: PromoteArgs) -> PromoteOutput:
    evaluation = await enforce_gate(ctx, "memory_promote_note", args.require_outcome_pass)
    written = await _write(
        ctx,
        target="workspace_memory_notes",
        session_id=ctx.session_id,
        content=args.content,
        mode=args.mode,
        source="memory_promote_note",
        sources=provenance.recorded(ctx, await _promoted_sources(ctx, args)),
        expected_version_id=args.expected_version_id,
        expected_content_hash=args.expected_content_hash,
    )
    return PromoteOutput(**written.model_dump(), outcome_evaluation=evaluation)
