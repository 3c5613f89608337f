"""Learnings: lessons, corrections and errors recorded for later sessions, and listed."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from managed_tools.stores import learnings
from managed_tools.stores.provenance import Trust
from managed_tools.tools.framework.context import provenance
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.uris import memory_uri
from managed_tools.tools.framework.context.what_runs import visible
from managed_tools.tools.framework.wire.models import Arguments, NonEmptyStr, WireModel
from managed_tools.tools.outcomes.gate import enforce_gate


class LearningView(WireModel):
    learning_id: str
    kind: Literal["lesson", "correction", "error"]
    title: str
    detail: str
    promote_to_memory: bool
    session_id: str | None
    created_at: str
    trust: Trust
    provenance: str  # an imported learning names its file and line (`managed-tools memory import`)


def _learning(item: learnings.Learning) -> LearningView:
    fields = item.model_dump(exclude={"id", "agent_id", "provenance"})
    sources = item.provenance
    return LearningView(learning_id=item.id, **fields, trust=sources.trust, provenance=provenance.described(sources))


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


def promotes(args: RecordArgs) -> bool:
    return args.promote_to_memory


async def learning_gate(ctx: ToolContext, args: RecordArgs) -> None:
    if args.promote_to_memory:
        await enforce_gate(ctx, "learning_record", None)


async def learning_preview(ctx: ToolContext, args: RecordArgs) -> str:
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
