"""Memory stores (reference §2d, §3): list, read, write with versions and preconditions, promote notes, learnings.

| target | scope | how it changes |
|---|---|---|
| session_state, working_buffer | session | memory_write (replace/append), versioned |
| workspace_memory_notes | agent | memory_promote_note only (always_ask, outcome-gated), versioned |
| workspace_memory | agent | read-only: promoted learnings plus the notes |
| checkpoint, shell_state | session | read-only JSON views of session state |
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from managed_tools.stores import events, learnings, memory, outcomes, sessions
from managed_tools.stores.memory import VersionRecord
from managed_tools.stores.provenance import Provenance, Trust
from managed_tools.tools.framework import provenance
from managed_tools.tools.framework.context import ToolContext
from managed_tools.tools.framework.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.errors import ToolError
from managed_tools.tools.framework.models import (
    Arguments,
    ExpectedContentHash,
    ExpectedVersionId,
    NoArguments,
    NonEmptyStr,
    RequireOutcomePass,
    SessionId,
    WireModel,
)
from managed_tools.tools.framework.scope import scoped_session_id
from managed_tools.tools.framework.uris import memory_uri
from managed_tools.tools.framework.what_runs import visible
from managed_tools.tools.outcomes.gate import Evaluation, enforce_gate
from managed_tools.tools.shell import posture as shell_core

Target = Literal["session_state", "working_buffer", "workspace_memory", "workspace_memory_notes", "checkpoint",
                 "shell_state"]  # fmt: skip
VersionedTarget = Literal["session_state", "working_buffer", "workspace_memory_notes"]
WritableTarget = Literal["session_state", "working_buffer"]
MAX_CONTENT_CHARS = 1_000_000
DEFAULT_READ_CHARS = 20_000
NOTES_PLACEHOLDER = "_No managed memory notes yet._"


@dataclass(frozen=True)
class StoreInfo:
    title: str
    description: str
    scope: Literal["session", "agent"]
    written_by: str | None
    format: Literal["markdown", "json"]


STORES: dict[str, StoreInfo] = {
    "session_state": StoreInfo(
        "Session state", "What this session is doing and has decided.", "session", "memory_write", "markdown"
    ),
    "working_buffer": StoreInfo(
        "Working buffer", "Scratch notes for the task at hand.", "session", "memory_write", "markdown"
    ),
    "workspace_memory": StoreInfo(
        "Workspace memory", "The agent's MEMORY.md: promoted learnings and notes.", "agent", None, "markdown"
    ),
    "workspace_memory_notes": StoreInfo(
        "Workspace memory notes",
        "Notes shared by every session of the agent.",
        "agent",
        "memory_promote_note",
        "markdown",
    ),
    "checkpoint": StoreInfo("Checkpoint", "The session's status, cursor and outcome summary.", "session", None, "json"),
    "shell_state": StoreInfo(
        "Shell state", "The session's shell: cwd, env keys, last commands.", "session", None, "json"
    ),
}


def scope_of(ctx: ToolContext, target: str, session_id: str) -> str:
    return memory.agent_scope(ctx.agent_id) if STORES[target].scope == "agent" else session_id


# ---- reading -------------------------------------------------------------------------------------------


async def workspace_memory(ctx: ToolContext) -> str:
    promoted = await learnings.latest(ctx.tx, ctx.agent_id, 50, promoted_only=True)
    notes = (await memory.read(ctx.tx, memory.agent_scope(ctx.agent_id), "workspace_memory_notes")).content.strip()
    lines = ["# MEMORY", "", "## Learnings", ""]
    lines += [f"- [{item.kind}] {item.title} — {item.detail}" for item in promoted] or ["_No promoted learnings yet._"]
    lines += ["", "## Managed Memory Notes", "", notes or NOTES_PLACEHOLDER]
    return "\n".join(lines) + "\n"


async def checkpoint(ctx: ToolContext, session_id: str) -> str:
    session = await sessions.get_session(ctx.tx, session_id)
    count, _, last_event = await events.session_event_stats(ctx.tx, session_id)
    wake = await sessions.latest_wake(ctx.tx, session_id)
    outcome = await outcomes.active(ctx.tx, session_id)
    history = await outcomes.history(ctx.tx, session_id)
    view = {
        "sessionId": session_id,
        "agentId": session.agent_id,
        "status": session.status,
        "stopReason": session.stop_reason,
        "updatedAt": session.last_activity_at,
        "lastWakeId": None if wake is None else wake.id,
        "eventCursor": {"lastEventId": last_event, "eventCount": count},
        "lastSummary": await events.latest_summary(ctx.tx, session_id),
        "activeOutcome": None if outcome is None else {"title": outcome.title, "criteria": outcome.success_criteria},
        "outcomeEvaluationHistory": [
            {"iteration": h.iteration, "status": h.evaluation.get("status"), "evaluatedAt": h.evaluated_at}
            for h in history
        ],
    }
    return json.dumps({"checkpoint": view}, indent=2)


@dataclass(frozen=True)
class Rendered:
    """A store as a person or model reads it, with its latest version's id, hash and sources (versioned ones)."""

    content: str
    version_id: str | None = None
    content_hash: str | None = None
    provenance: Provenance | None = None


async def render(ctx: ToolContext, target: str, session_id: str) -> Rendered:
    if target == "workspace_memory":
        # Its notes' sources (the learnings in it were each approved by a person).
        notes = await memory.read(ctx.tx, memory.agent_scope(ctx.agent_id), "workspace_memory_notes")
        return Rendered(await workspace_memory(ctx), provenance=await memory.provenance_of(ctx.tx, notes.version_id))
    if target == "checkpoint":
        return Rendered(await checkpoint(ctx, session_id))
    if target == "shell_state":
        shell = await shell_core.posture(ctx.runtime, ctx.tx, session_id)
        return Rendered(json.dumps({"shellState": shell.model_dump(mode="json")}, indent=2))
    doc = await memory.read(ctx.tx, scope_of(ctx, target, session_id), target)
    sources = await memory.provenance_of(ctx.tx, doc.version_id)
    return Rendered(doc.content, doc.version_id, doc.content_hash, sources)


class StoreView(WireModel):
    target: str
    title: str
    description: str
    scope: Literal["session", "agent"]
    writable: bool
    written_by: str | None
    searchable: bool
    format: Literal["markdown", "json"]


class ListOutput(WireModel):
    count: int
    stores: list[StoreView]


async def memory_list(ctx: ToolContext, _: NoArguments) -> ListOutput:
    views = [
        StoreView(
            target=name,
            title=info.title,
            description=info.description,
            scope=info.scope,
            writable=info.written_by is not None,
            written_by=info.written_by,
            searchable=True,
            format=info.format,
        )
        for name, info in STORES.items()
    ]
    return ListOutput(count=len(views), stores=views)


class ReadArgs(Arguments):
    target: Target
    session_id: SessionId | None = None
    max_chars: Annotated[int, Field(ge=1, le=200_000, description="Cut the content after this many characters.")] = (
        DEFAULT_READ_CHARS
    )


class ReadOutput(WireModel):
    target: str
    session_id: str
    format: Literal["markdown", "json"]
    content: str
    empty: bool
    char_count: int
    truncated: bool
    version_id: str | None
    content_hash: str | None
    uri: str
    trust: Trust | None = Field(description="untrusted: derived from an upstream result or another agent's output.")
    provenance: str | None


async def memory_read(ctx: ToolContext, args: ReadArgs) -> ReadOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    shown = await render(ctx, args.target, session_id)
    content = shown.content
    return ReadOutput(
        target=args.target,
        session_id=session_id,
        format=STORES[args.target].format,
        content=content[: args.max_chars],
        empty=not content.strip(),
        char_count=len(content),
        truncated=len(content) > args.max_chars,
        version_id=shown.version_id,
        content_hash=shown.content_hash,
        uri=memory_uri(args.target, session_id),
        trust=None if shown.provenance is None else shown.provenance.trust,
        provenance=None if shown.provenance is None else provenance.described(shown.provenance),
    )


# ---- writing -------------------------------------------------------------------------------------------


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
    version, previous, new_content = await memory.write(
        ctx.tx,
        scope=scope_of(ctx, target, session_id),
        target=target,
        agent_id=ctx.agent_id,
        session_id=session_id if STORES[target].scope == "session" else None,
        wake_id=ctx.wake_id,
        content=content,
        mode=mode,
        source=source,
        provenance=sources,
        expected_version_id=expected_version_id,
        expected_content_hash=expected_content_hash,
        searchable_title=f"{target} of session {session_id}" if STORES[target].scope == "session" else target,
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


async def _gate(ctx: ToolContext, args: PromoteArgs) -> None:
    await enforce_gate(ctx, "memory_promote_note", args.require_outcome_pass)


async def _promoted_sources(ctx: ToolContext, args: PromoteArgs) -> Provenance:
    return await _sources(ctx, "workspace_memory_notes", ctx.session_id, args.mode, "memory_promote_note")


async def _promote_untrusted(ctx: ToolContext, args: PromoteArgs) -> str | None:
    return provenance.untrusted_reason(await _promoted_sources(ctx, args))


async def _promote_preview(ctx: ToolContext, args: PromoteArgs) -> str:
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


# ---- versions ------------------------------------------------------------------------------------------


class VersionView(WireModel):
    version_id: str
    agent_id: str
    session_id: str | None
    target: str
    created_at: str
    source: str
    mode: str
    content_hash: str
    size_bytes: int
    wake_id: str | None
    preview: str
    trust: Trust
    provenance: str


def _version(record: VersionRecord) -> VersionView:
    sources = record.provenance
    fields = record.model_dump(exclude={"id", "provenance"})
    return VersionView(version_id=record.id, **fields, trust=sources.trust, provenance=provenance.described(sources))


class VersionsArgs(Arguments):
    target: VersionedTarget
    session_id: SessionId | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 10


class VersionsOutput(WireModel):
    target: str
    count: int
    versions: list[VersionView]


async def memory_list_versions(ctx: ToolContext, args: VersionsArgs) -> VersionsOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    found = await memory.list_versions(ctx.tx, scope_of(ctx, args.target, session_id), args.target, args.limit)
    return VersionsOutput(target=args.target, count=len(found), versions=[_version(v) for v in found])


class ReadVersionArgs(Arguments):
    target: VersionedTarget
    version_id: NonEmptyStr
    session_id: SessionId | None = None
    max_chars: Annotated[int, Field(ge=1, le=200_000)] = DEFAULT_READ_CHARS


class ReadVersionOutput(WireModel):
    version: VersionView
    content: str
    truncated: bool


async def memory_read_version(ctx: ToolContext, args: ReadVersionArgs) -> ReadVersionOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    record, content = await memory.read_version(
        ctx.tx, scope_of(ctx, args.target, session_id), args.target, args.version_id
    )
    return ReadVersionOutput(
        version=_version(record), content=content[: args.max_chars], truncated=len(content) > args.max_chars
    )


# ---- learnings -----------------------------------------------------------------------------------------


class LearningView(WireModel):
    learning_id: str
    kind: Literal["lesson", "correction", "error"]
    title: str
    detail: str
    promote_to_memory: bool
    session_id: str | None
    created_at: str


def _learning(item: learnings.Learning) -> LearningView:
    return LearningView(learning_id=item.id, **item.model_dump(exclude={"id", "agent_id"}))


class RecordArgs(Arguments):
    kind: Literal["lesson", "correction", "error"]
    title: Annotated[NonEmptyStr, Field(max_length=120)]
    detail: Annotated[NonEmptyStr, Field(max_length=400)]
    promote_to_memory: bool = Field(
        default=False,
        description="Also into the shared MEMORY.md (needs a passing outcome).",
    )


class RecordOutput(WireModel):
    agent_id: str
    learning: LearningView
    workspace_memory_uri: str | None


def _promotes(args: RecordArgs) -> bool:
    return args.promote_to_memory


async def _learning_gate(ctx: ToolContext, args: RecordArgs) -> None:
    if args.promote_to_memory:
        await enforce_gate(ctx, "learning_record", None)


async def _learning_preview(ctx: ToolContext, args: RecordArgs) -> str:
    return (
        f"This adds a {args.kind} to the shared MEMORY.md of agent {ctx.agent_id}, read by every later session:\n"
        f"    [{args.kind}] {visible(args.title)} — {visible(args.detail)}"
    )


async def learning_record(ctx: ToolContext, args: RecordArgs) -> RecordOutput:
    if args.promote_to_memory:  # the same gate as memory_promote_note, re-checked inside the write
        await enforce_gate(ctx, "learning_record", None)
    item = await learnings.record(
        ctx.tx,
        agent_id=ctx.agent_id,
        session_id=ctx.session_id,
        kind=args.kind,
        title=args.title,
        detail=args.detail,
        promote=args.promote_to_memory,
    )
    uri = memory_uri("workspace_memory", ctx.session_id) if args.promote_to_memory else None
    if uri is not None:
        ctx.touched.add(uri)
    return RecordOutput(agent_id=ctx.agent_id, learning=_learning(item), workspace_memory_uri=uri)


class LearningListArgs(Arguments):
    limit: Annotated[int, Field(ge=1, le=200)] = 20


class LearningListOutput(WireModel):
    agent_id: str
    count: int
    learnings: list[LearningView]


async def learning_list(ctx: ToolContext, args: LearningListArgs) -> LearningListOutput:
    items = await learnings.latest(ctx.tx, ctx.agent_id, args.limit)
    return LearningListOutput(agent_id=ctx.agent_id, count=len(items), learnings=[_learning(i) for i in items])


DEFINITIONS = (
    ToolDefinition(
        name="memory_list",
        title="List memory stores",
        description="List the memory stores (memory_read's targets) and who writes each.",
        input_model=NoArguments,
        output_model=ListOutput,
        handler=memory_list,
        effects=("memory_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="memory_read",
        title="Read a memory store",
        description="Read one memory store's current content, with its version id and content hash.",
        input_model=ReadArgs,
        output_model=ReadOutput,
        handler=memory_read,
        effects=("memory_read",),
    ),
    ToolDefinition(
        name="memory_write",
        title="Write session memory",
        description="Replace or append session_state or working_buffer; every write is a version "
        "(expectedVersionId: compare-and-swap).",
        input_model=WriteArgs,
        output_model=WriteOutput,
        handler=memory_write,
        read_only=False,
        effects=("memory_write",),
        max_argument_bytes=4 * MAX_CONTENT_CHARS + 4096,
        examples=(
            ToolExample(
                description="Append progress to the session state",
                input={"target": "session_state", "content": "- tests pass", "mode": "append"},
            ),
        ),
    ),
    ToolDefinition(
        name="memory_list_versions",
        title="List memory versions",
        description="List the versions of a memory store, newest first, to read or restore an older one.",
        input_model=VersionsArgs,
        output_model=VersionsOutput,
        handler=memory_list_versions,
        effects=("memory_read",),
    ),
    ToolDefinition(
        name="memory_read_version",
        title="Read a memory version",
        description="Read one immutable version of a memory store by its versionId.",
        input_model=ReadVersionArgs,
        output_model=ReadVersionOutput,
        handler=memory_read_version,
        effects=("memory_read",),
    ),
    ToolDefinition(
        name="memory_promote_note",
        title="Promote a workspace note",
        description="Write the agent's shared workspace memory notes. A person approves each call; gated on a "
        "passing outcome.",
        input_model=PromoteArgs,
        output_model=PromoteOutput,
        handler=memory_promote_note,
        read_only=False,
        permission_policy="always_ask",
        effects=("memory_write",),
        precondition=_gate,
        asks_because=_promote_untrusted,
        consent_preview=_promote_preview,
        max_argument_bytes=4 * MAX_CONTENT_CHARS + 4096,
    ),
    ToolDefinition(
        name="learning_record",
        title="Record a learning",
        description="Record a lesson, correction or error for later sessions; promoting it to the shared MEMORY.md "
        "asks a person.",
        input_model=RecordArgs,
        output_model=RecordOutput,
        handler=learning_record,
        asks_when=_promotes,
        precondition=_learning_gate,
        consent_preview=_learning_preview,
        read_only=False,
        effects=("memory_write",),
    ),
    ToolDefinition(
        name="learning_list",
        title="List learnings",
        description="List the agent's latest learnings, oldest first.",
        input_model=LearningListArgs,
        output_model=LearningListOutput,
        handler=learning_list,
        effects=("learning_read",),
    ),
)
