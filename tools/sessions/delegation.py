"""Delegation to child sessions (reference §2b): create a child of the same agent seeded with a task, list a
session's children, and advance a child a few bounded cycles.

A child runs through the client's model only where the client offers sampling with tools (handshake era); every
tool call of that loop goes through the executor in the child's own session and wake, so validation, permission
pauses and events are the child's. Everywhere else the child is handed off: the result says how to attach a
client to it, and the call waits a bounded time for progress made there. A child never "runs" otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

import anyio
from pydantic import Field

from managed_tools.stores import events, outcomes, plans, sessions
from managed_tools.stores.db import Tx
from managed_tools.stores.sessions import SessionRecord
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.context import Attachment, Ports, ToolContext
from managed_tools.tools.framework.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.errors import ToolError
from managed_tools.tools.framework.executor import execute
from managed_tools.tools.framework.models import Arguments, NonEmptyStr, SessionId, WireModel
from managed_tools.tools.framework.ports import ModelTurn, NoChildModel, SamplingUnavailableError, ToolSpec
from managed_tools.tools.framework.scope import scoped_session
from managed_tools.tools.sessions.tools import Known, SessionSummary, sort_sessions, summary_fields

MAX_CYCLES = 10
MAX_WAIT_SECONDS = 120
POLL_SECONDS = 0.2
MAX_MODEL_TOKENS = 4000
# A child run through sampling cannot delegate or run children of its own: one level, bounded.
NOT_FOR_CHILDREN = frozenset({"session_delegate", "session_run_child"})


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


class CallRecord(WireModel):
    tool_name: str
    status: str
    error_kind: str | None
    request_id: str | None


class HowToWork(WireModel):
    stdio: str
    http_header: str
    note: str


StopReason = Literal["idle", "max_cycles", "requires_action", "model_error", "progress", "no_progress"]


class RunChildOutput(WireModel):
    parent_session_id: str
    child_session: SessionSummary
    mode: Literal["sampling", "handoff"]
    executed_cycles: int
    loop_stop_reason: StopReason
    response: str | None
    tool_calls: list[CallRecord]
    processed_event_ids: list[str]
    new_event_count: int
    attached_clients: int
    how_to_work: HowToWork | None


@dataclasses.dataclass
class _Run:
    cycles: int = 0
    stop: StopReason = "idle"
    response: str | None = None
    calls: list[CallRecord] = dataclasses.field(default_factory=list)
    processed: list[str] = dataclasses.field(default_factory=list)
    new_events: int = 0


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
    sampling = ctx.ports.child_model.available()
    run = await (_run_through_model(ctx, child, args.cycles) if sampling else _wait_for_progress(ctx, child, args))
    async with ctx.runtime.db.write() as tx:
        after, _, _ = await events.session_event_stats(tx, child.id)
        run.new_events = max(0, after - before)
        await events.append_event(
            tx,
            ctx.session_id,
            ctx.wake_id,
            "session.child_idle",
            {
                "childSessionId": child.id,
                "mode": "sampling" if sampling else "handoff",
                "executedCycles": run.cycles,
                "loopStopReason": run.stop,
                "newEventCount": run.new_events,
            },
            summary=f"Child {child.id}: {run.stop} after {run.cycles} cycle(s)",
        )
        attached = await sessions.open_wakes(tx, child.id)
        reader = dataclasses.replace(ctx, tx=tx)
        (summary,) = await _summaries(reader, [await sessions.get_session(tx, child.id)])
    return RunChildOutput(
        parent_session_id=ctx.session_id,
        child_session=summary,
        mode="sampling" if sampling else "handoff",
        executed_cycles=run.cycles,
        loop_stop_reason=run.stop,
        response=run.response,
        tool_calls=run.calls,
        processed_event_ids=run.processed,
        new_event_count=run.new_events,
        attached_clients=attached,
        how_to_work=None if sampling else _how_to_work(child.id),
    )


def _how_to_work(child_id: str) -> HowToWork:
    return HowToWork(
        stdio=f"managed-tools serve --session {child_id}",
        http_header=f"Mcp-Managed-Session: {child_id}",
        note="This client cannot run the child's model here (no sampling with tools), so the child did not run. "
        "Attach a client to it (stdio: start the server with the command above; HTTP: send the header on its "
        "requests), work its pending task, then call session_run_child again to see its progress.",
    )


async def _wait_for_progress(ctx: ToolContext, child: SessionRecord, args: RunChildInput) -> _Run:
    """The hand-off: wait (bounded by the argument and the call's deadline) for an event another client adds."""
    async with ctx.runtime.db.read() as tx:
        _, _, start = await events.session_event_stats(tx, child.id)
    limit = min(args.wait_seconds, max(0.0, ctx.deadline - anyio.current_time() - 1))
    with anyio.move_on_after(limit):
        while True:
            async with ctx.runtime.db.read() as tx:
                _, _, last = await events.session_event_stats(tx, child.id)
            if last != start:
                return _Run(stop="progress")
            await anyio.sleep(POLL_SECONDS)
    return _Run(stop="no_progress")


async def _run_through_model(ctx: ToolContext, child: SessionRecord, cycles: int) -> _Run:
    """Up to `cycles` model turns; each tool call runs through the executor in the child's session and wake."""
    run = _Run()
    model = ctx.ports.child_model
    async with ctx.runtime.db.write() as tx:
        wake = await sessions.open_wake(
            tx, child.id, transport="sampling", setup_fingerprint=setup_fingerprint(ctx.runtime)
        )
        await events.append_event(
            tx,
            child.id,
            wake.id,
            "span.started",
            {"spanId": wake.id, "spanKind": "wake", "transport": "sampling", "parentSessionId": ctx.session_id},
            summary="Run by its parent through the client's model",
        )
        run.processed = await events.mark_processed(tx, child.id)
        conversation = [ModelTurn(role="user", text=await _brief(tx, child))]
    attachment = Attachment(session_id=child.id, wake_id=wake.id, transport="sampling", owner=ctx.owner)
    ports = Ports(
        consent=model.consent_in(child.id, wake.id),
        progress=ctx.ports.progress,
        sampler=ctx.ports.sampler,
        client_log=ctx.ports.client_log,
        child_model=NoChildModel(),
    )
    tools = [
        ToolSpec(name=d.name, description=d.description, input_schema=d.input_schema())
        for d in ctx.runtime.registry
        if d.name not in NOT_FOR_CHILDREN
    ]
    try:
        while run.cycles < cycles:
            try:
                turn = await model.turn(
                    _SYSTEM.format(child=child.id), conversation, tools, max_tokens=MAX_MODEL_TOKENS
                )
            except SamplingUnavailableError as exc:
                run.stop, run.response = "model_error", str(exc)
                return run
            run.cycles += 1
            run.response = turn.text or run.response
            conversation.append(turn)
            if not turn.calls:
                run.stop = "idle"
                return run
            results: list[tuple[str, str, bool]] = []
            for call in turn.calls:
                if call.name in NOT_FOR_CHILDREN:  # not offered, and refused if named anyway
                    run.calls.append(
                        CallRecord(tool_name=call.name, status="error", error_kind="unknown_tool", request_id=None)
                    )
                    results.append((call.id, f"{call.name} is not available inside a child's run.", True))
                    continue
                result = await execute(ctx.runtime, attachment, ports, call.name, call.arguments)
                request = (result.action_required or {}).get("requestId")
                run.calls.append(
                    CallRecord(
                        tool_name=call.name, status=result.status, error_kind=result.error_kind, request_id=request
                    )
                )
                results.append((call.id, result.text, result.is_error))
                if result.status == "blocked" and result.error_kind in ("permission", "input_required"):
                    run.stop = "requires_action"  # a person must answer before the child goes on
                    return run
            conversation.append(ModelTurn(role="user", results=results))
        run.stop = "max_cycles"
        return run
    finally:
        with anyio.CancelScope(shield=True):
            async with ctx.runtime.db.write() as tx:
                await sessions.close_wake(tx, wake.id)
                await events.append_event(
                    tx,
                    child.id,
                    wake.id,
                    "span.completed",
                    {"spanId": wake.id, "spanKind": "wake", "result": run.stop},
                    summary=f"Run ended: {run.stop}",
                )


_SYSTEM = (
    "You are working in child session {child}. Do its task with the tools offered; every call runs in that "
    "session. When the task is done, or you cannot go on, answer with a short summary and no tool calls."
)


async def _brief(tx: Tx, child: SessionRecord) -> str:
    """The child's first message: its task (the latest user message) and its outcome, if any."""
    found = await events.window_events(tx, child.id, events.EventFilter(types=["user.message"], limit=1))
    task = str(found[-1].payload.get("text", "")) if found else (child.title or "Continue the session's work.")
    outcome = await outcomes.active(tx, child.id)
    if outcome is None:
        return task
    criteria = "".join(f"\n- {c}" for c in outcome.success_criteria)
    return f"{task}\n\nDone means: {outcome.title}{criteria}"


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
        description="Advance a direct child a few bounded cycles through the client's model (sampling with "
        "tools); otherwise say how to attach a client to it and wait briefly for progress.",
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
