"""Learnings: lessons, corrections and errors recorded for later sessions, and listed. A new one can supersede an
older one (a person approves); its result names any it repeats or contradicts (stores/similar.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from managed_tools.stores import learnings
from managed_tools.stores.errors import NotFoundError, PreconditionError
from managed_tools.stores.provenance import Trust
from managed_tools.tools.framework.context import provenance
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.uris import memory_uri
from managed_tools.tools.framework.context.what_runs import visible
from managed_tools.tools.framework.wire.errors import Refused
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
    state: learnings.State
    supersedes: str | None


class NoticeView(WireModel):
    relation: Literal["duplicate", "contradiction"]
    learning_id: str
    title: str
    similarity: float  # the Jaccard index of the two learnings' content words
    message: str


def notice_views(found: list[learnings.Notice]) -> list[NoticeView]:
    said = {"duplicate": "nearly repeats", "contradiction": "may contradict"}
    return [
        NoticeView(
            **n.model_dump(),
            message=f"This {said[n.relation]} learning {n.learning_id} ({n.title!r}); memory_correct can supersede "
            "or forget one of them.",
        )
        for n in found
    ]


def view(item: learnings.Learning) -> LearningView:
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
    supersedes: NonEmptyStr | None = None  # a learning this replaces (a person approves; history keeps it)


class RecordOutput(WireModel):
    agent_id: str
    learning: LearningView
    workspace_memory_uri: str | None
    notices: list[NoticeView]  # learnings this one nearly repeats or may contradict


def promotes(args: RecordArgs) -> bool:
    return args.promote_to_memory or args.supersedes is not None


async def learning_gate(ctx: ToolContext, args: RecordArgs) -> None:
    if args.promote_to_memory:
        await enforce_gate(ctx, "learning_record", None)
    if args.supersedes is not None:
        await changeable(ctx, args.supersedes, "supersede")


async def changeable(ctx: ToolContext, learning_id: str, action: learnings.Action) -> learnings.Learning:
    """The learning, if this change to it can be made (said before a person is asked)."""
    try:
        return await learnings.changeable(ctx.tx, ctx.agent_id, learning_id, action)
    except (NotFoundError, PreconditionError) as exc:
        raise Refused(str(exc)) from exc


def shown(item: learnings.Learning | RecordArgs) -> str:
    return f"[{item.kind}] {visible(item.title)} — {visible(item.detail)}"


async def learning_preview(ctx: ToolContext, args: RecordArgs) -> str:
    lines = []
    if args.promote_to_memory:
        lines.append(f"This adds a {args.kind} to the shared MEMORY.md of agent {ctx.agent_id}, read by every later "
                     f"session:\n    {shown(args)}")  # fmt: skip
    if args.supersedes is not None:
        old = await learnings.get(ctx.tx, ctx.agent_id, args.supersedes)
        lines.append(
            f"This supersedes learning {old.id} of agent {ctx.agent_id}: it leaves workspace memory, search and "
            f"learning_list (its history keeps it; memory_correct restore brings it back).\n    was: {shown(old)}"
            f"\n    now: {shown(args)}"
        )
    return "\n".join(lines)


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
        supersedes=args.supersedes,
    )
    found = await learnings.notices(ctx.tx, ctx.agent_id, args.title, args.detail, skip=item.id)
    uri = memory_uri("workspace_memory", ctx.session_id) if args.promote_to_memory else None
    if uri is not None:
        ctx.touched.add(uri)
    return RecordOutput(
        agent_id=ctx.agent_id, learning=view(item), workspace_memory_uri=uri, notices=notice_views(found)
    )


class LearningListArgs(Arguments):
    limit: Annotated[int, Field(ge=1, le=200)] = 20
    include_hidden: bool = False  # also the superseded and forgotten ones


class LearningListOutput(WireModel):
    agent_id: str
    count: int
    learnings: list[LearningView]
    hidden: int  # superseded or forgotten learnings left out (includeHidden lists them)
    note: str | None


def hidden_note(count: int) -> str | None:
    if not count:
        return None
    return f"{count} superseded or forgotten learning(s) left out; learning_list includeHidden: true lists them."


async def learning_list(ctx: ToolContext, args: LearningListArgs) -> LearningListOutput:
    items = await learnings.latest(ctx.tx, ctx.agent_id, args.limit, hidden_too=args.include_hidden)
    hidden = 0 if args.include_hidden else await learnings.hidden(ctx.tx, ctx.agent_id)
    return LearningListOutput(
        agent_id=ctx.agent_id,
        count=len(items),
        learnings=[view(i) for i in items],
        hidden=hidden,
        note=hidden_note(hidden),
    )
