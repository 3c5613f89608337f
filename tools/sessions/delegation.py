"""Delegation to child sessions (reference §2b): create a child of the same agent seeded with a task, list a
session's children, and advance a child a few bounded cycles.

A child runs through the operator's model (config.json `models`) in every era, or else through the client's
where it offers sampling with tools (handshake era); every tool call of that run goes through the executor in the
child's own session and wake, so validation, permission pauses and events are the child's (child_run.py).
Everywhere else the child is handed off: the result says how to attach a client to it, and the call waits a
bounded time for progress made there. A child never "runs" otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

import anyio
from pydantic import Field

from managed_tools.stores import attachments, delegations, events, outcomes, plans, sessions
from managed_tools.stores.delegations import ParentCommunication
from managed_tools.stores.errors import StoreError
from managed_tools.stores.sessions import SessionRecord, SessionStatus
from managed_tools.tools.framework.context.attachments import AttachmentRef, copy
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import scoped_session
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, NonEmptyStr, SessionId, WireModel
from managed_tools.tools.sessions.child_run import (
    ANSWER_EVENT,
    NOT_FOR_CHILDREN,
    CallRecord,
    SessionRun,
    StopReason,
    run_session,
    tell_parent,
)
from managed_tools.tools.sessions.tools import Known, SessionFilters, SessionSummary, sort_sessions, summary_fields

MAX_CYCLES = 10
MAX_WAIT_SECONDS = 120
POLL_SECONDS = 0.2


# ---- session_delegate --------------------------------------------------------------------------------


MAX_ATTACHMENTS = 20
MAX_CHOSEN = 100  # tools or toolsets a delegation names
Chosen = Annotated[list[str], Field(max_length=MAX_CHOSEN)]  # each name checked against the served ones
AttachmentIds = Annotated[
    list[Annotated[str, Field(max_length=64)]],
    Field(max_length=MAX_ATTACHMENTS, description="Attachment ids to copy in."),
]


class DelegateInput(Arguments):
    name: Annotated[NonEmptyStr, Field(max_length=64, description="Listed as tag name:<name>.")]
    task: Annotated[NonEmptyStr, Field(max_length=8000, description="Its first message.")]
    title: Annotated[NonEmptyStr | None, Field(max_length=200, description="Its outcome: what done means.")] = None
    detail: Annotated[str | None, Field(max_length=2000)] = None
    success_criteria: Annotated[list[Annotated[str, Field(max_length=300)]], Field(max_length=20)] = Field(
        default_factory=list
    )
    plan_steps: Annotated[
        list[Annotated[NonEmptyStr, Field(max_length=200)]],
        Field(max_length=50),
    ] = Field(default_factory=list)
    resumable: bool = Field(default=False, description="Answers more messages.")
    parent_communication: ParentCommunication = Field(
        default="explicit", description="implicit: its completion is queued here."
    )
    max_instances: Annotated[int | None, Field(ge=1, le=100, description="Cap on unfinished children.")] = None
    attachments: AttachmentIds = Field(default_factory=list)
    tools: Chosen | None = Field(default=None, description="Only these tools, toolsets.")
    toolsets: Chosen | None = None


class DelegateOutput(WireModel):
    parent_session_id: str
    child_session: SessionSummary
    seeded_event_ids: list[str]
    attachments: list[AttachmentRef]  # the copies, valid in the child


async def _summaries(ctx: ToolContext, records: list[SessionRecord]) -> list[SessionSummary]:
    current = await scoped_session(ctx, None)
    known = await Known.read(ctx, current, [r.id for r in records])
    return [SessionSummary(**summary_fields(r, known)) for r in records]


async def session_delegate(ctx: ToolContext, args: DelegateInput) -> DelegateOutput:
    parent = await scoped_session(ctx, None)  # the parent is always the caller's own session
    if (
        args.max_instances is not None
        and await delegations.unfinished_children(ctx.tx, parent.id) >= args.max_instances
    ):
        raise ToolError(
            f"This session already has {args.max_instances} unfinished child session(s) (maxInstances); message one "
            "of them (session_list_children) or raise maxInstances."
        )
    narrowed = _narrowed(ctx, args.tools, args.toolsets)
    child = await sessions.create_session(
        ctx.tx, ctx.agent_id, owner=ctx.owner, parent_id=parent.id, title=args.title or args.task[:80]
    )
    if narrowed is not None:  # the child's first event: what its model is sent, and all it may call
        await events.append_event(ctx.tx, child.id, None, delegations.TOOLS_EVENT, {"tools": narrowed})
    await delegations.record(
        ctx.tx, child.id, parent.id, name=args.name.strip(), resumable=args.resumable,
        parent_communication=args.parent_communication,
    )  # fmt: skip
    copied = await _copy_all(ctx, args.attachments, from_session=parent.id, to_session=child.id)
    seeded: list[str] = []

    async def seed(event_type: str, payload: dict[str, Any], summary: str | None = None) -> None:
        # Pending: the child has not taken them up yet (its first run marks them seen).
        event = await events.append_event(ctx.tx, child.id, None, event_type, payload, summary=summary, processed=False)
        seeded.append(event.id)

    if args.title is not None:
        criteria = list(dict.fromkeys(c.strip() for c in args.success_criteria if c.strip()))
        detail = args.detail.strip() if args.detail and args.detail.strip() else None
        await outcomes.define(
            ctx.tx, session_id=child.id, agent_id=ctx.agent_id, title=args.title, detail=detail, criteria=criteria
        )
        await seed("user.define_outcome", {"title": args.title, "successCriteria": criteria})
    if args.plan_steps:
        await plans.setup(ctx.tx, child.id, args.task[:200], [s.strip() for s in args.plan_steps])
        await seed("user.plan", {"objective": args.task[:200], "steps": args.plan_steps})
    await seed("user.message", _message(args.task, parent.id, copied), args.task[:200])
    await events.append_event(
        ctx.tx,
        parent.id,
        ctx.wake_id,
        "session.child_created",
        {"childSessionId": child.id, "name": args.name.strip(), "title": child.title, "seededEventIds": seeded},
        summary=f"Delegated to child {args.name.strip()} ({child.id})",
    )
    (summary,) = await _summaries(ctx, [child])
    return DelegateOutput(
        parent_session_id=parent.id, child_session=summary, seeded_event_ids=seeded, attachments=copied
    )


def _narrowed(ctx: ToolContext, tools: list[str] | None, toolsets: list[str] | None) -> list[str] | None:
    """The served tools `tools` and `toolsets` name together (in catalogue order), or None when neither is given;
    an unknown name, or a tool a child never gets, is refused naming the valid ones."""
    if tools is None and toolsets is None:
        return None
    registry = ctx.runtime.registry
    offered = [d.name for d in registry if d.name not in NOT_FOR_CHILDREN]
    groups = registry.toolsets()
    unknown = [name for name in tools or () if name not in offered]
    if unknown:
        raise ToolError(
            f"A child cannot be given {', '.join(repr(n) for n in unknown[:5])}: not a tool this server serves, or "
            f"one a child never gets ({', '.join(sorted(NOT_FOR_CHILDREN))}); tools/list shows the names."
        )
    bad_sets = [name for name in toolsets or () if name not in groups]
    if bad_sets:
        raise ToolError(
            f"Unknown toolset {', '.join(repr(n) for n in bad_sets[:5])}; the toolsets here are: {', '.join(groups)}."
        )
    chosen = {*(tools or ()), *(n for group in toolsets or () for n in groups[group])}
    kept = [name for name in offered if name in chosen]
    if not kept:
        raise ToolError("The tools and toolsets chosen leave the child no tool; name at least one it may use.")
    return kept


async def _copy_all(ctx: ToolContext, ids: list[str], *, from_session: str, to_session: str) -> list[AttachmentRef]:
    """Seed 000 §7: an attachment crossing to another session is copied there, so its reference is valid there."""
    try:
        return [
            await copy(ctx.runtime, ctx.tx, i, from_session=from_session, to_session=to_session, owner=ctx.owner)
            for i in dict.fromkeys(ids)
        ]
    except StoreError as exc:
        raise ToolError(f"Cannot copy the attachment: {exc}") from None


def _message(text: str, sender: str, attached: list[AttachmentRef]) -> dict[str, Any]:
    """A user message from the parent; the copied attachments are named in its text, so the child's model
    sees where to read them."""
    if attached:
        text += "\n\nAttached:" + "".join(f"\n- {a.name} ({a.mime_type}): {a.path}" for a in attached)
    return {"text": text, "fromSessionId": sender, "attachments": [a.id for a in attached]}


# ---- session_list_children ---------------------------------------------------------------------------


class ChildrenInput(SessionFilters):
    session_id: SessionId | None = Field(default=None, description="The parent (a session of this agent).")


class ChildrenOutput(WireModel):
    parent_session_id: str
    count: int
    total: int
    sessions: list[SessionSummary]


async def session_list_children(ctx: ToolContext, args: ChildrenInput) -> ChildrenOutput:
    parent = await scoped_session(ctx, args.session_id)
    children = await sessions.list_children(ctx.tx, ctx.agent_id, parent.id, owner=ctx.owner)
    since = args.active_since()
    summaries = [summary for summary in await _summaries(ctx, children) if args.wanted(summary, since)]
    sort_sessions(summaries)
    shown = summaries[: args.limit]
    return ChildrenOutput(parent_session_id=parent.id, count=len(shown), total=len(summaries), sessions=shown)


# ---- session_run_child -------------------------------------------------------------------------------


class ChildInput(Arguments):
    session_id: Annotated[NonEmptyStr, Field(max_length=64, description="A direct child's id.")]
    return_attachments: bool = Field(default=False, description="Copy its new attachments here.")


class RunChildInput(ChildInput):
    cycles: Annotated[int, Field(ge=1, le=MAX_CYCLES, description="Most model turns.")] = 3
    wait_seconds: Annotated[
        float, Field(ge=0, le=MAX_WAIT_SECONDS, description="No model: wait this long for progress.")
    ] = 10


class HowToWork(WireModel):
    stdio: str
    http_header: str
    note: str


class ChildRunReport(WireModel):
    """What a call that advanced a child did (session_run_child, session_message_child)."""

    parent_session_id: str
    mode: Literal["sampling", "model", "handoff"]
    executed_cycles: int
    loop_stop_reason: StopReason
    response: str | None
    tool_calls: list[CallRecord]
    processed_event_ids: list[str]
    new_event_count: int
    attached_clients: int
    how_to_work: HowToWork | None
    attachments: list[AttachmentRef]  # with returnAttachments: the child's new ones, copied to this session


class RunChildOutput(ChildRunReport):
    child_session: SessionSummary


class MessageChildOutput(ChildRunReport):
    """The report without the child's whole summary (session_list_children has it): a smaller tools/list."""

    child_session_id: str
    child_status: SessionStatus


async def _direct_child(ctx: ToolContext, session_id: str) -> SessionRecord:
    async with ctx.runtime.db.read() as tx:
        child = await sessions.get_agent_session(tx, session_id, ctx.agent_id, owner=ctx.owner)
    if child.id == ctx.session_id:
        raise ToolError("A session cannot run itself; pass the id of one of its children (session_list_children).")
    if child.parent_id != ctx.session_id:
        raise ToolError(f"Session {child.id} is not a direct child of session {ctx.session_id}.")
    return child


async def session_run_child(ctx: ToolContext, args: RunChildInput) -> RunChildOutput:
    child = await _direct_child(ctx, args.session_id)
    return await _advance(ctx, child, args, cycles=args.cycles, wait_seconds=args.wait_seconds)


async def _advance(
    ctx: ToolContext, child: SessionRecord, args: ChildInput, *, cycles: int, wait_seconds: float
) -> RunChildOutput:
    """Run the child through a model where one is at hand, else hand it off and wait; then tell the parent."""
    async with ctx.runtime.db.read() as tx:
        before, _, _ = await events.session_event_stats(tx, child.id)
        had = {a.id for a in await attachments.of_session(tx, child.id)}
    model = ctx.ports.child_model
    mode = model.mode if model.available() else "handoff"
    if mode == "handoff":
        run = await _wait_for_progress(ctx, child, wait_seconds)
    else:
        run = await run_session(
            ctx.runtime, child.id, model, ctx.ports, owner=ctx.owner, cycles=cycles, transport=mode,
            started_by=ctx.session_id,
        )  # fmt: skip
    async with ctx.runtime.db.write() as tx:
        after, _, _ = await events.session_event_stats(tx, child.id)
        new_events = max(0, after - before)
        await events.append_event(
            tx,
            ctx.session_id,
            ctx.wake_id,
            "session.child_idle",
            {
                "childSessionId": child.id,
                "mode": mode,
                "executedCycles": run.cycles,
                "loopStopReason": run.stop,
                "newEventCount": new_events,
                "childEventSeq": await events.last_seq(tx, child.id),  # where the next hand-off look starts
            },
            summary=f"Child {child.id}: {run.stop} after {run.cycles} cycle(s)",
        )
        attached = await sessions.open_wakes(tx, child.id)
        reader = dataclasses.replace(ctx, tx=tx)
        (summary,) = await _summaries(reader, [await sessions.get_session(tx, child.id)])
        made = [a.id for a in await attachments.of_session(tx, child.id) if a.id not in had]
        back = (
            await _copy_all(reader, made, from_session=child.id, to_session=ctx.session_id)
            if args.return_attachments
            else []
        )
    ctx.touched.update(run.touched)
    return RunChildOutput(
        parent_session_id=ctx.session_id,
        child_session=summary,
        mode=mode,
        executed_cycles=run.cycles,
        loop_stop_reason=run.stop,
        response=run.response,
        tool_calls=run.calls,
        processed_event_ids=run.processed,
        new_event_count=new_events,
        attached_clients=attached,
        how_to_work=_how_to_work(child.id) if mode == "handoff" else None,
        attachments=back,
    )


def _how_to_work(child_id: str) -> HowToWork:
    return HowToWork(
        stdio=f"managed-tools serve --session {child_id}",
        http_header=f"Mcp-Managed-Session: {child_id}",
        note="This client cannot run the child's model here (no sampling with tools), so the child did not run. "
        "Attach a client to it (stdio: start the server with the command above; HTTP: send the header on its "
        "requests), work its pending task, then call session_run_child again to see its progress.",
    )


async def _wait_for_progress(ctx: ToolContext, child: SessionRecord, wait_seconds: float) -> SessionRun:
    """The hand-off: what a client attached to the child did since the parent last looked (not only during this
    call), waited for up to the argument and the call's deadline. Its answer (session_answer_parent) ends the wait
    as the child's `response` with `idle`; its tool calls are `progress`."""
    async with ctx.runtime.db.read() as tx:
        cursor = await events.child_cursor(tx, ctx.session_id, child.id)
        work = await events.handed_off_work(tx, child.id, cursor)  # one look whatever the wait (waitSeconds 0)
    limit = min(wait_seconds, max(0.0, ctx.deadline - anyio.current_time() - 1))
    with anyio.move_on_after(limit):
        while work.answer is None and not work.calls:
            await anyio.sleep(POLL_SECONDS)
            async with ctx.runtime.db.read() as tx:
                work = await events.handed_off_work(tx, child.id, cursor)
    if work.answer is not None:
        return SessionRun(stop="idle", response=work.answer)
    return SessionRun(stop="progress" if work.calls else "no_progress")


# ---- session_message_child ---------------------------------------------------------------------------


class MessageChildInput(ChildInput):
    message: Annotated[NonEmptyStr, Field(max_length=8000, description="The child's next message.")]
    attachments: AttachmentIds = Field(default_factory=list)


async def session_message_child(ctx: ToolContext, args: MessageChildInput) -> MessageChildOutput:
    child = await _direct_child(ctx, args.session_id)
    if child.status == "terminated":
        raise ToolError(f"Child {child.id} is terminated; delegate a new one.")
    async with ctx.runtime.db.write() as tx:
        delegation = await delegations.get(tx, child.id)
        answered = await events.window_events(tx, child.id, events.EventFilter(types=[ANSWER_EVENT], limit=1))
        if delegation is not None and not delegation.resumable and answered:
            raise ToolError(
                f"Child {delegation.name} has answered and was not delegated resumable, so it takes no further "
                "message; delegate a new child (resumable: true for one that does)."
            )
        writer = dataclasses.replace(ctx, tx=tx)
        copied = await _copy_all(writer, args.attachments, from_session=ctx.session_id, to_session=child.id)
        await events.append_event(
            tx, child.id, None, "user.message", _message(args.message, ctx.session_id, copied),
            summary=args.message[:200], processed=False,
        )  # fmt: skip
    # The model's own limits bound the run; without a model the message waits for the child's client.
    ran = await _advance(ctx, child, args, cycles=MAX_CYCLES, wait_seconds=0)
    return MessageChildOutput(
        **ran.model_dump(exclude={"child_session"}),
        child_session_id=ran.child_session.session_id,
        child_status=ran.child_session.status,
    )


# Both run a child: their own transactions (a run outlives many), cancelled with the call, bounded.
# ---- session_answer_parent ---------------------------------------------------------------------------


class AnswerParentInput(Arguments):
    text: Annotated[NonEmptyStr, Field(max_length=8000, description="Your answer to the parent's task.")]


class AnswerParentOutput(WireModel):
    parent_session_id: str
    event_id: str
    queued_to_parent: bool


async def session_answer_parent(ctx: ToolContext, args: AnswerParentInput) -> AnswerParentOutput:
    """A client attached to a hand-off child answers its parent as a model run would: the child's `agent.message`
    (the parent's session_run_child returns it as `response`) and, for an implicit child, its queued completion.
    Only the session's own: the attached client answers for the session it is attached to, never another."""
    delegation = await delegations.get(ctx.tx, ctx.session_id)
    if delegation is None:
        raise ToolError(
            f"Session {ctx.session_id} was not delegated (session_delegate makes a child); no parent waits."
        )
    payload = {"text": args.text, "stopReason": "idle"}
    event = await events.append_event(
        ctx.tx, ctx.session_id, ctx.wake_id, ANSWER_EVENT, payload, summary=args.text[:200]
    )
    told = await tell_parent(ctx.tx, ctx.session_id, "idle", args.text)
    if told is not None:
        ctx.touched.add(told)
    return AnswerParentOutput(
        parent_session_id=delegation.parent_session_id, event_id=event.id, queued_to_parent=told is not None
    )


RUNS_A_CHILD: dict[str, Any] = {
    "effects": ("session_write",),
    "read_only": False,
    "own_transactions": True,
    "interrupt_behavior": "cancel",
    "timeout_seconds": 600,
}

DEFINITIONS = (
    ToolDefinition(
        name="session_answer_parent",
        title="Answer the parent session",
        description="In a delegated child worked by an attached client: give the parent your answer (its "
        "session_run_child's response).",
        input_model=AnswerParentInput,
        output_model=AnswerParentOutput,
        handler=session_answer_parent,
        effects=("session_write",),
        read_only=False,
    ),
    ToolDefinition(
        name="session_delegate",
        title="Delegate to a child session",
        description="Create a named child session seeded with a task, outcome and plan; session_run_child runs it.",
        input_model=DelegateInput,
        output_model=DelegateOutput,
        handler=session_delegate,
        effects=("session_write",),
        read_only=False,
        examples=(
            ToolExample(
                description="A child with an outcome",
                input={
                    "name": "triage",
                    "task": "Summarise the open issues",
                    "title": "Issues summarised",
                    "successCriteria": ["covers all"],
                },
            ),
        ),
    ),
    ToolDefinition(
        name="session_list_children",
        title="List child sessions",
        description="List a session's direct children, filtered as session_list.",
        input_model=ChildrenInput,
        output_model=ChildrenOutput,
        handler=session_list_children,
        effects=("session_read",),
    ),
    ToolDefinition(
        name="session_message_child",
        title="Message a child session",
        description="Send a direct child its next message, then run it like session_run_child.",
        input_model=MessageChildInput,
        output_model=MessageChildOutput,
        handler=session_message_child,
        **RUNS_A_CHILD,
    ),
    ToolDefinition(
        name="session_run_child",
        title="Run a child session",
        description="Run a direct child through the configured model or the client's; else say how to attach a "
        "client, and wait briefly.",
        input_model=RunChildInput,
        output_model=RunChildOutput,
        handler=session_run_child,
        **RUNS_A_CHILD,
    ),
)
