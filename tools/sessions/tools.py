"""Session navigation: list sessions, snapshot one, read its events and traces (reference §2a)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from managed_tools.stores import approvals, attachments, delegations, events, outcomes, sessions, usage
from managed_tools.stores.events import EventFilter, EventRecord
from managed_tools.stores.outcomes import EvaluationRecord, Outcome
from managed_tools.stores.sessions import SessionRecord, SessionStatus
from managed_tools.stores.usage import Usage
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.context.budget import CallLimits, SessionLimits, session_over
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import (
    Lineage,
    Relation,
    in_lineage,
    relation,
    scoped_session,
    scoped_session_id,
)
from managed_tools.tools.framework.context.uris import (
    SESSION_TARGETS,
    VIEWS,
    attachment_uri,
    evaluation_uri,
    memory_uri,
    view_uri,
)
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, Formatted, NonEmptyStr, SessionId, WireModel
from managed_tools.tools.framework.wire.sections import PART_NAMES, Partial, one_of
from managed_tools.tools.outcomes.gate import EvalStatus, Evaluation, OutcomePosture, Trend, posture
from managed_tools.tools.sessions import context, wakes
from managed_tools.tools.shell import posture as shell_core

MAX_EVENT_LIMIT = 200
MAX_ACTIVE_MINUTES = 10 * 366 * 24 * 60  # ten years; far beyond it a datetime cannot go back
EventTypes = Annotated[list[NonEmptyStr], Field(max_length=32, description="Only events of these types.")]
Limit = Annotated[int, Field(ge=1, le=MAX_EVENT_LIMIT)]


# ---- summaries ---------------------------------------------------------------------------------------


class EventCursor(WireModel):
    last_event_id: str | None
    event_count: int


class SessionSummary(WireModel):
    session_id: str
    agent_id: str
    parent_session_id: str | None
    title: str | None
    tags: list[str]  # `name:<name>` for a delegated child (seed 000 §6)
    status: SessionStatus
    stop_reason: str | None
    created_at: str
    updated_at: str
    last_activity_at: str
    requires_action: bool
    is_current: bool
    relation_to_current: Relation | None
    child_count: int
    setup_matches_current: bool
    # The outcome as last evaluated (outcome_evaluate records each verdict); a snapshot shows it live instead.
    active_outcome_title: str | None
    outcome_status: EvalStatus | None
    outcome_trend: Trend | None
    promotion_ready: bool
    outcome_evaluated_at: str | None
    outcome_matches_current: bool


class BudgetView(WireModel):
    """What the session has used (every recorded call, its delegated sessions' included;
    tools/framework/context/budget.py says what counts) against the limits configured (config.json `budgets`; null:
    none)."""

    used: Usage
    per_session: SessionLimits
    per_call: CallLimits
    over: str | None = Field(
        description="The session limits reached, by it or a session it was delegated from: its next calls are refused."
    )


MAX_SNAPSHOT_ATTACHMENTS = 10  # the map stays bounded however many files a session attached


class SessionResources(WireModel):
    """The reference snapshot's `artifactPaths`, as the resources this server serves instead (resources/read)."""

    under: str = Field(description="The URI every path below continues.")
    paths: list[str] = Field(description="The session's memory stores, evaluation and views.")
    attachments: list[str] = Field(description=f"URIs of its newest attachments (at most {MAX_SNAPSHOT_ATTACHMENTS}).")


class SessionSnapshot(Partial, SessionSummary, OutcomePosture):
    ALWAYS = frozenset({"session_id", "status"})

    environment_id: str
    pending_action_kind: Literal["tool_confirmation", "custom_tool"] | None
    pending_action_tool_name: str | None
    pending_request_count: int
    turns: int
    pending_event_count: int
    last_wake_id: str | None
    latest_summary: str | None
    event_cursor: EventCursor
    agent_setup_fingerprint: str | None
    shell_state: dict[str, Any] | None
    queued_wakes: list[wakes.WakeView]
    next_wake_at: str | None
    budget: BudgetView
    resources: SessionResources


@dataclass(frozen=True)
class Known:
    """What every summary of the agent's sessions is compared with, read once per call."""

    current: SessionRecord
    children: dict[str, int]
    setups: dict[str, str]
    setup: str
    outcome_of: dict[str, Outcome]
    evaluations: dict[str, EvaluationRecord]
    names: dict[str, str]  # delegated children's names

    @classmethod
    async def read(cls, ctx: ToolContext, current: SessionRecord, session_ids: list[str]) -> Known:
        ids = {*session_ids, current.id}
        return cls(
            current,
            await sessions.child_counts(ctx.tx, ctx.agent_id, owner=ctx.owner),
            await sessions.latest_setup_fingerprints(ctx.tx, ctx.agent_id),
            setup_fingerprint(ctx.runtime),
            await outcomes.active_many(ctx.tx, ids),
            await outcomes.latest_evaluations(ctx.tx, ids),
            await delegations.names(ctx.tx, ids),
        )


def _outcome_fields(record: SessionRecord, known: Known) -> dict[str, Any]:
    outcome = known.outcome_of.get(record.id)
    mine = known.outcome_of.get(known.current.id)
    recorded = known.evaluations.get(record.id)
    # Only a verdict on the outcome active now counts: one on an outcome since redefined says nothing of it.
    evaluation = None
    if outcome is not None and recorded is not None and recorded.outcome_fingerprint == outcome.fingerprint:
        evaluation = Evaluation.model_validate(recorded.evaluation)
    return {
        "active_outcome_title": None if outcome is None else outcome.title,
        "outcome_status": None if evaluation is None else evaluation.status,
        "outcome_trend": None if evaluation is None else evaluation.trend,
        "promotion_ready": evaluation is not None and evaluation.promotion_ready,
        "outcome_evaluated_at": None if evaluation is None or recorded is None else recorded.evaluated_at,
        "outcome_matches_current": outcome is not None
        and mine is not None
        and outcome.title.strip().lower() == mine.title.strip().lower(),
    }


def summary_fields(record: SessionRecord, known: Known) -> dict[str, Any]:
    current = known.current
    return {
        "session_id": record.id,
        "agent_id": record.agent_id,
        "parent_session_id": record.parent_id,
        "title": record.title,
        "tags": [f"name:{known.names[record.id]}"] if record.id in known.names else [],
        "status": record.status,
        "stop_reason": record.stop_reason,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "last_activity_at": record.last_activity_at,
        "requires_action": record.status == "requires_action",
        "is_current": record.id == current.id,
        "relation_to_current": relation(current, record),
        "child_count": known.children.get(record.id, 0),
        "setup_matches_current": known.setups.get(record.id) == known.setup,
        **_outcome_fields(record, known),
    }


# ---- session_list ------------------------------------------------------------------------------------


class SessionFilters(Arguments):
    """What session_list and session_list_children both filter by."""

    limit: Annotated[int, Field(ge=1, le=100)] = 10
    active_minutes: Annotated[
        int | None, Field(ge=1, le=MAX_ACTIVE_MINUTES, description="Active in the last N minutes.")
    ] = None
    status: SessionStatus | None = None
    has_outcome: bool | None = None
    outcome_status: EvalStatus | None = None  # as last evaluated
    promotion_ready: bool | None = None
    outcome_trend: Trend | None = None

    def active_since(self) -> str | None:
        if self.active_minutes is None:
            return None
        return (datetime.now(UTC) - timedelta(minutes=self.active_minutes)).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def wanted(self, summary: SessionSummary, since: str | None) -> bool:
        checks = (
            (self.status, summary.status),
            (self.has_outcome, summary.active_outcome_title is not None),
            (self.outcome_status, summary.outcome_status),
            (self.promotion_ready, summary.promotion_ready),
            (self.outcome_trend, summary.outcome_trend),
        )
        if since is not None and summary.last_activity_at < since:
            return False
        return all(wanted is None or wanted == value for wanted, value in checks)


class SessionListInput(SessionFilters, Formatted):
    include_current: bool = Field(default=True, description="Include the current session.")
    lineage: Lineage | None = Field(default=None, description="Relation to this session.")


class SessionListOutput(WireModel):
    agent_id: str
    count: int
    total: int
    sessions: list[SessionSummary]


TREND_RANK = {"improving": 3, "first_iteration": 2, "stable": 1, "regressing": 0}
RELATION_RANK = {"parent": 2, "child": 2, "sibling": 1}


def sort_sessions(summaries: list[SessionSummary]) -> None:
    """The reference's order: same setup, same outcome, waiting on a person, trend, relation, latest activity."""
    summaries.sort(key=lambda s: s.last_activity_at, reverse=True)  # stable sorts: least significant key first
    summaries.sort(
        key=lambda s: (
            s.setup_matches_current,
            s.outcome_matches_current,
            s.requires_action,
            TREND_RANK.get(s.outcome_trend or "", -1),
            RELATION_RANK.get(s.relation_to_current or "", 0),
        ),
        reverse=True,
    )


async def session_list(ctx: ToolContext, args: SessionListInput) -> SessionListOutput:
    current = await scoped_session(ctx, None)
    since = args.active_since()
    records = await sessions.list_agent_sessions(ctx.tx, ctx.agent_id, owner=ctx.owner, active_since=since)
    known = await Known.read(ctx, current, [r.id for r in records])
    summaries = [
        summary
        for summary in (SessionSummary(**summary_fields(r, known)) for r in records)
        if (args.include_current or not summary.is_current)
        and args.wanted(summary, since)
        and in_lineage(args.lineage, summary.relation_to_current)
    ]
    sort_sessions(summaries)
    shown = summaries[: args.limit]
    return SessionListOutput(agent_id=ctx.agent_id, count=len(shown), total=len(summaries), sessions=shown)


# ---- session_get_snapshot ----------------------------------------------------------------------------


class SessionScopedInput(Arguments):
    session_id: SessionId | None = None


class SnapshotInput(SessionScopedInput):
    fields: Annotated[list[str] | None, BeforeValidator(one_of(SessionSnapshot.parts(), "field")), PART_NAMES] = None


async def session_get_snapshot(ctx: ToolContext, args: SnapshotInput) -> SessionSnapshot:
    current = await scoped_session(ctx, None)
    record = await scoped_session(ctx, args.session_id)
    known = await Known.read(ctx, current, [record.id])
    count, pending, last_id = await events.session_event_stats(ctx.tx, record.id)
    wake = await sessions.latest_wake(ctx.tx, record.id)
    waiting = [r for r in await approvals.list_open(ctx.tx, record.id) if r.status == "pending"]
    queued_wakes, next_wake_at = await wakes.pending(ctx.tx, record.id)
    live = (await posture(ctx, record.id)).model_dump(
        by_alias=False
    )  # a snapshot judges the outcome now, not as last recorded
    return SessionSnapshot(
        **{**summary_fields(record, known), **live},
        environment_id=f"local:{ctx.agent_id}",
        pending_action_kind=waiting[0].kind if waiting else None,
        pending_action_tool_name=waiting[0].tool_name if waiting else None,
        pending_request_count=len(waiting),
        turns=await events.count_tool_calls(ctx.tx, record.id),
        pending_event_count=pending,
        last_wake_id=None if wake is None else wake.id,
        latest_summary=await events.latest_summary(ctx.tx, record.id),
        event_cursor=EventCursor(last_event_id=last_id, event_count=count),
        agent_setup_fingerprint=None if wake is None else wake.setup_fingerprint,
        shell_state=(await shell_core.posture(ctx.runtime, ctx.tx, record.id)).model_dump(mode="json"),
        queued_wakes=queued_wakes,
        next_wake_at=next_wake_at,
        budget=await budget_view(ctx, record.id),
        resources=await resource_map(ctx, record.id),
    ).only(args.fields)


async def resource_map(ctx: ToolContext, session_id: str) -> SessionResources:
    uris = [memory_uri(target, session_id) for target in SESSION_TARGETS]
    uris.append(evaluation_uri(session_id))
    uris += [view_uri(name, session_id) for name, view in VIEWS.items() if view.tool in ctx.runtime.registry]
    under = evaluation_uri(session_id).removesuffix("outcome/evaluation")
    assert all(uri.startswith(under) for uri in uris)
    newest = (await attachments.of_session(ctx.tx, session_id))[-MAX_SNAPSHOT_ATTACHMENTS:]
    return SessionResources(
        under=under,
        paths=[uri.removeprefix(under) for uri in uris],
        attachments=[attachment_uri(session_id, r.id) for r in newest],
    )


async def budget_view(ctx: ToolContext, session_id: str) -> BudgetView:
    used, budgets = await usage.read(ctx.tx, session_id), ctx.runtime.budgets
    over = session_over(budgets.per_session, (await usage.read_limiting(ctx.tx, session_id))[0])
    return BudgetView(used=used, per_session=budgets.per_session, per_call=budgets.per_call, over=over)


# ---- events and traces -------------------------------------------------------------------------------


class EventView(WireModel):
    id: str
    type: str
    created_at: str
    wake_id: str | None
    processed: bool
    summary: str | None
    payload: dict[str, Any]


def _view(event: EventRecord) -> EventView:
    return EventView(
        id=event.id,
        type=event.type,
        created_at=event.created_at,
        wake_id=event.wake_id,
        processed=event.processed,
        summary=event.summary,
        payload=event.payload,
    )


class SessionEventsInput(Formatted):
    session_id: SessionId | None = None
    after_event_id: NonEmptyStr | None = Field(default=None, description="Only events after this one.")
    before_event_id: NonEmptyStr | None = Field(default=None, description="Only events before this one.")
    around_event_id: NonEmptyStr | None = Field(
        default=None, description="A window around this event (wins over after/before)."
    )
    wake_id: NonEmptyStr | None = None
    before_limit: Annotated[int, Field(ge=0, le=MAX_EVENT_LIMIT)] = 0
    after_limit: Annotated[int, Field(ge=0, le=MAX_EVENT_LIMIT)] = 0
    include_processed: bool = True
    limit: Limit = Field(default=20, description="Keep the last N events of the window.")
    types: EventTypes | None = None

    @model_validator(mode="after")
    def _limits_need_around(self) -> SessionEventsInput:
        if (self.before_limit or self.after_limit) and self.around_event_id is None:
            raise ValueError("beforeLimit and afterLimit only apply with aroundEventId")
        return self


class EventsOutput(WireModel):
    session_id: str
    count: int
    events: list[EventView]


async def session_get_events(ctx: ToolContext, args: SessionEventsInput) -> EventsOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    found = await events.window_events(
        ctx.tx,
        session_id,
        EventFilter(wake_id=args.wake_id, types=args.types, include_processed=args.include_processed, limit=args.limit),
        after_event_id=args.after_event_id,
        before_event_id=args.before_event_id,
        around_event_id=args.around_event_id,
        before_limit=args.before_limit,
        after_limit=args.after_limit,
    )
    return EventsOutput(session_id=session_id, count=len(found), events=[_view(e) for e in found])


class TracesInput(Arguments):
    session_id: SessionId | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 8


class TraceView(WireModel):
    wake_id: str
    started_at: str
    updated_at: str
    event_count: int
    event_types: list[str]
    latest_summary: str | None


class TracesOutput(WireModel):
    session_id: str
    count: int
    traces: list[TraceView]


async def session_list_traces(ctx: ToolContext, args: TracesInput) -> TracesOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    traces = await events.list_traces(ctx.tx, session_id, args.limit)
    views = [TraceView(**t.model_dump()) for t in traces]
    return TracesOutput(session_id=session_id, count=len(views), traces=views)


class TraceInput(Arguments):
    session_id: SessionId | None = None
    wake_id: NonEmptyStr
    types: EventTypes | None = None
    limit: Limit = 50


class TraceOutput(WireModel):
    session_id: str
    wake_id: str
    count: int
    events: list[EventView]


async def session_get_trace(ctx: ToolContext, args: TraceInput) -> TraceOutput:
    record = await scoped_session(ctx, args.session_id)
    found = await events.window_events(
        ctx.tx, record.id, EventFilter(wake_id=args.wake_id, types=args.types, limit=args.limit)
    )
    if not found and not await ctx.tx.scalar(
        "SELECT 1 FROM wakes WHERE id = ? AND session_id = ?", (args.wake_id, record.id)
    ):
        raise ToolError(f"No wake {args.wake_id} exists in session {record.id}; session_list_traces lists them.")
    return TraceOutput(session_id=record.id, wake_id=args.wake_id, count=len(found), events=[_view(e) for e in found])


DEFINITIONS = (
    ToolDefinition(
        name="session_list",
        title="List sessions",
        description="List this agent's sessions with status, relation and outcome posture; filter by lineage, "
        "activity, status, outcome.",
        input_model=SessionListInput,
        output_model=SessionListOutput,
        handler=session_list,
        effects=("session_read",),
    ),
    ToolDefinition(
        name="session_get_snapshot",
        title="Snapshot a session",
        description="One session: status, pending actions, wakes, latest summary, event cursor, resources.",
        input_model=SnapshotInput,
        output_model=SessionSnapshot,
        handler=session_get_snapshot,
        effects=("session_read",),
    ),
    *context.DEFINITIONS,
    ToolDefinition(
        name="session_get_events",
        title="Read session events",
        description="A session's event log: a window after/before/around an event, filtered by wake and "
        "type, last N kept.",
        input_model=SessionEventsInput,
        output_model=EventsOutput,
        handler=session_get_events,
        effects=("session_read",),
        examples=(
            ToolExample(description="The last 5 tool completions", input={"types": ["span.completed"], "limit": 5}),
            ToolExample(
                description="Two events either side of one",
                input={"aroundEventId": "0192f0c4-0000-7000-8000-000000000000", "beforeLimit": 2, "afterLimit": 2},
            ),
        ),
    ),
    ToolDefinition(
        name="session_list_traces",
        title="List session traces",
        description="List the wakes (connections) of a session, newest first, with event counts and types.",
        input_model=TracesInput,
        output_model=TracesOutput,
        handler=session_list_traces,
        effects=("session_read",),
    ),
    ToolDefinition(
        name="session_get_trace",
        title="Read one trace",
        description="Read the events of one wake of a session (ids: session_list_traces).",
        input_model=TraceInput,
        output_model=TraceOutput,
        handler=session_get_trace,
        effects=("session_read",),
    ),
)
