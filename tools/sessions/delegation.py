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

from managed_tools.stores import events, outcomes, plans, sessions
from managed_tools.stores.sessions import SessionRecord
from managed_tools.tools.framework.context import ToolContext
from managed_tools.tools.framework.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.errors import ToolError
from managed_tools.tools.framework.models import Arguments, NonEmptyStr, SessionId, WireModel
from managed_tools.tools.framework.scope import scoped_session
from managed_tools.tools.sessions.child_run import CallRecord, SessionRun, StopReason, run_session
from managed_tools.tools.sessions.tools import Known, SessionSummary, sort_sessions, summary_fields

MAX_CYCLES = 10
MAX_WAIT_SECONDS = 120
POLL_SECONDS = 0.2


# ---- session_delegate --------------------------------------------------------------------------------


class DelegateInput(Arguments):
    task: Annotated[NonEmptyStr, Field(max_length=8000, description="What the child should do (its first message).")]
    title: Annotated[
        NonEmptyStr | None, Field(max_length=200, description="The child's outcome: what done means, in one line.")
    ] = None
    detail: Annotated[str | None, Field(max_length=2000)] = None
    success_criteria: Annotated[
        list[Annotated[str, Field(max_length=300)]], Field(max_length=20, description="Checkable statements.")
    ] = Field(default_factory=list)
    plan_steps: Annotated[
        list[Annotated[NonEmptyStr, Field(max_length=200)]],
        Field(max_length=50, description="Seed the child's plan with these steps (objective: the task)."),
    ] = Field(default_factory=list)


class DelegateOutput(WireModel):
    parent_session_id: str
    child_session: SessionSummary
    seeded_event_ids: list[str]


async def _summaries(ctx: ToolContext, records: list[SessionRecord]) -> list[SessionSummary]:
    current = await scoped_session(ctx, None)
    known = await Known.read(ctx, current, [r.id for r in records])
    return [SessionSummary(**summary_fields(r, known)) for r in records]


async def session_delegate(ctx: ToolContext, args: DelegateInput) -> DelegateOutput:
    parent = await scoped_session(ctx, None)  # the parent is always the caller's own session
    child = await sessions.create_session(
        ctx.tx, ctx.agent_id, owner=ctx.owner, parent_id=parent.id, title=args.title or args.task[:80]
    )
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
    await seed("user.message", {"text": args.task, "fromSessionId": parent.id}, args.task[:200])
    await events.append_event(
        ctx.tx,
        parent.id,
        ctx.wake_id,
        "session.child_created",
        {"childSessionId": child.id, "title": child.title, "seededEventIds": seeded},
        summary=f"Delegated to child {child.id}",
    )
    (summary,) = await _summaries(ctx, [child])
    return DelegateOutput(parent_session_id=parent.id, child_session=summary, seeded_event_ids=seeded)


# ---- session_list_children ---------------------------------------------------------------------------


class ChildrenInput(Arguments):
    session_id: SessionId | None = Field(default=None, description="The parent (a session of this agent).")
    limit: Annotated[int, Field(ge=1, le=100)] = 10


class ChildrenOutput(WireModel):
    parent_session_id: str
    count: int
    total: int
    sessions: list[SessionSummary]


async def session_list_children(ctx: ToolContext, args: ChildrenInput) -> ChildrenOutput:
    parent = await scoped_session(ctx, args.session_id)
    summaries = await _summaries(ctx, await sessions.list_children(ctx.tx, ctx.agent_id, parent.id, owner=ctx.owner))
    sort_sessions(summaries)
    shown = summaries[: args.limit]
    return ChildrenOutput(parent_session_id=parent.id, count=len(shown), total=len(summaries), sessions=shown)


# ---- session_run_child -------------------------------------------------------------------------------


class RunChildInput(Arguments):
    session_id: Annotated[
        NonEmptyStr, Field(max_length=64, description="A direct child of the current session (session_delegate).")
    ]
    cycles: Annotated[int, Field(ge=1, le=MAX_CYCLES, description="Model turns to run at most (with sampling).")] = 3
    wait_seconds: Annotated[
        float, Field(ge=0, le=MAX_WAIT_SECONDS, description="Without sampling: how long to wait for progress.")
    ] = 10


class HowToWork(WireModel):
    stdio: str
    http_header: str
    note: str


class RunChildOutput(WireModel):
    parent_session_id: str
    child_session: SessionSummary
    mode: Literal["sampling", "model", "handoff"]
    executed_cycles: int
    loop_stop_reason: StopReason
    response: str | None
    tool_calls: list[CallRecord]
    processed_event_ids: list[str]
    new_event_count: int
    attached_clients: int
    how_to_work: HowToWork | None


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
    async with ctx.runtime.db.read() as tx:
        before, _, _ = await events.session_event_stats(tx, child.id)
    model = ctx.ports.child_model
    mode = model.mode if model.available() else "handoff"
    if mode == "handoff":
        run = await _wait_for_progress(ctx, child, args)
    else:
        run = await run_session(
            ctx.runtime, child.id, model, ctx.ports, owner=ctx.owner, cycles=args.cycles, transport=mode,
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
            },
            summary=f"Child {child.id}: {run.stop} after {run.cycles} cycle(s)",
        )
        attached = await sessions.open_wakes(tx, child.id)
        reader = dataclasses.replace(ctx, tx=tx)
        (summary,) = await _summaries(reader, [await sessions.get_session(tx, child.id)])
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
    )


def _how_to_work(child_id: str) -> HowToWork:
    return HowToWork(
        stdio=f"managed-tools serve --session {child_id}",
        http_header=f"Mcp-Managed-Session: {child_id}",
        note="This client cannot run the child's model here (no sampling with tools), so the child did not run. "
        "Attach a client to it (stdio: start the server with the command above; HTTP: send the header on its "
        "requests), work its pending task, then call session_run_child again to see its progress.",
    )


async def _wait_for_progress(ctx: ToolContext, child: SessionRecord, args: RunChildInput) -> SessionRun:
    """The hand-off: wait (bounded by the argument and the call's deadline) for an event another client adds."""
    async with ctx.runtime.db.read() as tx:
        _, _, start = await events.session_event_stats(tx, child.id)
    limit = min(args.wait_seconds, max(0.0, ctx.deadline - anyio.current_time() - 1))
    with anyio.move_on_after(limit):
        while True:
            async with ctx.runtime.db.read() as tx:
                _, _, last = await events.session_event_stats(tx, child.id)
            if last != start:
                return SessionRun(stop="progress")
            await anyio.sleep(POLL_SECONDS)
    return SessionRun(stop="no_progress")


DEFINITIONS = (
    ToolDefinition(
        name="session_delegate",
        title="Delegate to a child session",
        description="Create a child session of this agent seeded with a task (and an outcome or plan where "
        "given); session_run_child advances it.",
        input_model=DelegateInput,
        output_model=DelegateOutput,
        handler=session_delegate,
        effects=("session_write",),
        read_only=False,
        examples=(
            ToolExample(
                description="A child with an outcome",
                input={
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
        description="List the direct children of a session (default: the current one), with status and outcome.",
        input_model=ChildrenInput,
        output_model=ChildrenOutput,
        handler=session_list_children,
        effects=("session_read",),
    ),
    ToolDefinition(
        name="session_run_child",
        title="Run a child session",
        description="Advance a direct child a few bounded cycles through the client's model where it offers "
        "sampling with tools; otherwise say how to attach a client to it and wait briefly for its progress.",
        input_model=RunChildInput,
        output_model=RunChildOutput,
        handler=session_run_child,
        effects=("session_write",),
        read_only=False,
        own_transactions=True,
        interrupt_behavior="cancel",
        timeout_seconds=600,
    ),
)
