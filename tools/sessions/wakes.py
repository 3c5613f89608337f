"""Proactive wakes (seed 004): a session asks to be woken later, for a reason; a running server's scheduler wakes
it (server/mcp/wake_scheduler.py). Wake *requests*, not the wakes of session_list_traces (one per connection)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AwareDatetime, Field, StringConstraints, model_validator

from managed_tools.stores import wake_requests
from managed_tools.stores.db import Tx
from managed_tools.stores.errors import StoreError
from managed_tools.stores.wake_requests import Priority, WakeRequest, WakeStatus
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import scoped_session
from managed_tools.tools.framework.context.uris import view_uri
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, SessionId, WireModel

MAX_QUEUED = 3  # per session, as the reference's loop directive allows
MAX_DELAY = timedelta(hours=24)
WakeRequestId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64)]


def iso(moment: datetime) -> str:
    """The stores' timestamp form (UTC, milliseconds, `Z`), so due times compare as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class WakeView(WireModel):
    wake_request_id: str
    session_id: str
    reason: str
    priority: Priority
    due_at: str
    status: WakeStatus
    result: str | None = Field(description="A headless run's answer, or why it failed.")
    offered_to_wake_id: str | None = Field(description="The connection (trace) a due wake was offered to.")
    created_at: str


def view(record: WakeRequest) -> WakeView:
    return WakeView(
        wake_request_id=record.id,
        session_id=record.session_id,
        reason=record.reason,
        priority=record.priority,
        due_at=record.due_at,
        status=record.status,
        result=record.result,
        offered_to_wake_id=record.offered_to,
        created_at=record.created_at,
    )


async def pending(tx: Tx, session_id: str) -> tuple[list[WakeView], str | None]:
    """The wakes a session waits on (queued, or due and waiting for a client), those offered to a connection still
    attached, and the next due time."""
    found = await wake_requests.pending_for(tx, session_id, limit=MAX_QUEUED * 4)
    return [view(r) for r in found], next_due(found)


def next_due(found: list[WakeRequest]) -> str | None:
    return min((r.due_at for r in found if r.status == "queued"), default=None)


# ---- session_schedule_wake -----------------------------------------------------------------------------


class ScheduleWakeInput(Arguments):
    reason: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=400)] = Field(
        description="What to do when woken."
    )
    due_at: AwareDatetime | None = Field(default=None, description="Or inSeconds.")
    in_seconds: Annotated[int | None, Field(ge=1, le=86_400)] = None
    priority: Priority = "normal"

    @model_validator(mode="after")
    def _one_time(self) -> ScheduleWakeInput:
        if (self.due_at is None) == (self.in_seconds is None):
            raise ValueError("give exactly one of dueAt and inSeconds")
        return self


class ScheduleWakeOutput(WireModel):
    wake: WakeView
    queued_count: int
    next_wake_at: str | None


async def session_schedule_wake(ctx: ToolContext, args: ScheduleWakeInput) -> ScheduleWakeOutput:
    record = await scoped_session(ctx, None)
    now = datetime.now(UTC)
    due = now + timedelta(seconds=args.in_seconds) if args.in_seconds is not None else args.due_at
    assert due is not None
    if due <= now:
        raise ToolError(f"dueAt {iso(due)} has passed; give a time after {iso(now)}, or inSeconds.")
    if due - now > MAX_DELAY:
        raise ToolError(f"dueAt {iso(due)} is more than 24 hours away; a wake can be at most 24 hours ahead.")
    if await wake_requests.count_queued(ctx.tx, record.id) >= MAX_QUEUED:
        raise ToolError(f"This session already has {MAX_QUEUED} queued wakes; cancel one (session_list_wakes).")
    scheduled = await wake_requests.schedule(
        ctx.tx, record.id, reason=args.reason, due_at=iso(due), priority=args.priority, requested_in=ctx.wake_id
    )
    ctx.touched.add(view_uri("wake_requests", record.id))
    found, next_at = await pending(ctx.tx, record.id)
    return ScheduleWakeOutput(
        wake=view(scheduled), queued_count=sum(w.status == "queued" for w in found), next_wake_at=next_at
    )


# ---- session_list_wakes --------------------------------------------------------------------------------


class ListWakesInput(Arguments):
    session_id: SessionId | None = None
    include_done: bool = Field(default=False, description="Also handled ones.")
    limit: Annotated[int, Field(ge=1, le=50)] = 10


class ListWakesOutput(WireModel):
    session_id: str
    count: int
    next_wake_at: str | None
    wakes: list[WakeView]


async def session_list_wakes(ctx: ToolContext, args: ListWakesInput) -> ListWakesOutput:
    record = await scoped_session(ctx, args.session_id)
    found = await (
        wake_requests.list_for(ctx.tx, record.id, limit=args.limit)
        if args.include_done
        else wake_requests.pending_for(ctx.tx, record.id, limit=args.limit)
    )
    views = [view(r) for r in found]
    return ListWakesOutput(session_id=record.id, count=len(views), next_wake_at=next_due(found), wakes=views)


# ---- session_cancel_wake -------------------------------------------------------------------------------


class CancelWakeInput(Arguments):
    wake_request_id: WakeRequestId


class CancelWakeOutput(WireModel):
    wake: WakeView


async def session_cancel_wake(ctx: ToolContext, args: CancelWakeInput) -> CancelWakeOutput:
    try:
        record = await wake_requests.get_owned(ctx.tx, args.wake_request_id, ctx.agent_id, owner=ctx.owner)
    except StoreError as exc:
        raise ToolError(str(exc)) from exc
    if not await wake_requests.cancel(ctx.tx, record.id):
        raise ToolError(f"Wake request {record.id} is {record.status}; only a queued or due wake can be cancelled.")
    ctx.touched.add(view_uri("wake_requests", record.session_id))
    return CancelWakeOutput(wake=view(await wake_requests.get_owned(ctx.tx, record.id, ctx.agent_id, owner=ctx.owner)))


DEFINITIONS = (
    ToolDefinition(
        name="session_schedule_wake",
        title="Schedule a wake",
        description="Wake this session later (within 24h, at most 3 queued), headless or in the next client.",
        input_model=ScheduleWakeInput,
        output_model=ScheduleWakeOutput,
        handler=session_schedule_wake,
        effects=("session_write",),
        read_only=False,
        examples=(ToolExample(description="In ten minutes", input={"reason": "Check the CI run", "inSeconds": 600}),),
    ),
    ToolDefinition(
        name="session_list_wakes",
        title="List wakes",
        description="List a session's queued and due wakes, soonest first.",
        input_model=ListWakesInput,
        output_model=ListWakesOutput,
        handler=session_list_wakes,
        effects=("session_read",),
    ),
    ToolDefinition(
        name="session_cancel_wake",
        title="Cancel a wake",
        description="Cancel a queued or due wake by its wakeRequestId.",
        input_model=CancelWakeInput,
        output_model=CancelWakeOutput,
        handler=session_cancel_wake,
        effects=("session_write",),
        read_only=False,
    ),
)
