"""The outcome tools: outcome_define, outcome_read, outcome_grade, outcome_evaluate and outcome_history.

The rubric lives in `gate` (reference §4, adapted to a server without a harness; docs/outcomes.md explains it).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from managed_tools.stores import events, outcomes
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import scoped_session_id
from managed_tools.tools.framework.context.uris import evaluation_uri, memory_uri
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.models import Arguments, NonEmptyStr, SessionId, WireModel
from managed_tools.tools.outcomes.gate import (
    Evaluation,
    Grade,
    GradeStatus,
    HistoryEntry,
    OutcomeView,
    evaluate,
    grade,
    history_entry,
    outcome_view,
)


class SessionArgs(Arguments):
    session_id: SessionId | None = None


class ReadOutput(WireModel):
    session_id: str
    active_outcome: OutcomeView | None


async def outcome_read(ctx: ToolContext, args: SessionArgs) -> ReadOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    return ReadOutput(session_id=session_id, active_outcome=outcome_view(await outcomes.active(ctx.tx, session_id)))


class DefineArgs(Arguments):
    session_id: SessionId | None = Field(default=None, description="Another session of this agent (a child's).")
    title: Annotated[NonEmptyStr, Field(max_length=200, description="What done means, in one line.")]
    detail: Annotated[str | None, Field(max_length=2000)] = None
    success_criteria: Annotated[
        list[Annotated[str, Field(max_length=300)]],
        Field(max_length=20, description="Checkable statements to grade against."),
    ] = Field(default_factory=list)


class DefineOutput(WireModel):
    session_id: str
    active_outcome: OutcomeView
    event_id: str


async def outcome_define(ctx: ToolContext, args: DefineArgs) -> DefineOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    criteria = list(dict.fromkeys(c.strip() for c in args.success_criteria if c.strip()))
    detail = args.detail.strip() if args.detail and args.detail.strip() else None
    outcome = await outcomes.define(
        ctx.tx, session_id=session_id, agent_id=ctx.agent_id, title=args.title, detail=detail, criteria=criteria
    )
    # Another session's log gets the event outside any wake of its own, as an evaluation of it is recorded.
    wake_id = ctx.wake_id if session_id == ctx.session_id else None
    payload: dict[str, Any] = {"title": outcome.title, "successCriteria": criteria}
    event = await events.append_event(ctx.tx, session_id, wake_id, "user.define_outcome", payload)
    ctx.touched.update({evaluation_uri(session_id), memory_uri("checkpoint", session_id)})
    view = outcome_view(outcome)
    assert view is not None
    return DefineOutput(session_id=session_id, active_outcome=view, event_id=event.id)


class GradeOutput(WireModel):
    session_id: str
    active_outcome: OutcomeView | None
    grade: Grade


async def outcome_grade(ctx: ToolContext, args: SessionArgs) -> GradeOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    outcome = await outcomes.active(ctx.tx, session_id)
    return GradeOutput(
        session_id=session_id, active_outcome=outcome_view(outcome), grade=await grade(ctx, session_id, outcome)
    )


class EvaluateArgs(SessionArgs):
    include_history: bool = False  # the history, as outcome_history shows it


class GradeBrief(WireModel):
    """The grade the evaluation rests on, in brief: its evidence and next step are the evaluation's
    (outcome_grade has the whole grade)."""

    status: GradeStatus
    matched_criteria: int
    total_criteria: int


class EvaluateOutput(WireModel):
    session_id: str
    active_outcome: OutcomeView | None
    grade: GradeBrief
    evaluation: Evaluation
    iteration: int | None = Field(description="This evaluation's entry in the history; null without an outcome.")
    history_count: int
    evaluation_history: list[HistoryEntry] | None = Field(description="Only with includeHistory.")


async def outcome_evaluate(ctx: ToolContext, args: EvaluateArgs) -> EvaluateOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    outcome, graded, evaluation, _ = await evaluate(ctx, session_id)
    if outcome is not None:  # over MCP there is no harness: the evaluation records its own history entry
        await outcomes.record_evaluation(
            ctx.tx,
            session_id=session_id,
            agent_id=ctx.agent_id,
            wake_id=ctx.wake_id if session_id == ctx.session_id else None,
            outcome=outcome,
            grade_status=graded.status,
            evaluation=evaluation.model_dump(mode="json"),
        )
        ctx.touched.update({evaluation_uri(session_id), memory_uri("checkpoint", session_id)})
    history = [history_entry(r) for r in await outcomes.history(ctx.tx, session_id)]
    return EvaluateOutput(
        session_id=session_id,
        active_outcome=outcome_view(outcome),
        grade=GradeBrief(
            status=graded.status, matched_criteria=graded.matched_criteria, total_criteria=graded.total_criteria
        ),
        evaluation=evaluation,
        iteration=history[-1].iteration if outcome is not None and history else None,
        history_count=len(history),
        evaluation_history=history if args.include_history else None,
    )


class HistoryArgs(Arguments):
    session_id: SessionId | None = None
    limit: Annotated[int, Field(ge=1, le=outcomes.HISTORY_CAP)] = 12


class HistoryOutput(WireModel):
    session_id: str
    active_outcome: OutcomeView | None
    count: int
    latest_iteration: int | None
    evaluations: list[HistoryEntry]


async def outcome_history(ctx: ToolContext, args: HistoryArgs) -> HistoryOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    entries = [history_entry(r) for r in await outcomes.history(ctx.tx, session_id, args.limit)]
    return HistoryOutput(
        session_id=session_id,
        active_outcome=outcome_view(await outcomes.active(ctx.tx, session_id)),
        count=len(entries),
        latest_iteration=entries[-1].iteration if entries else None,
        evaluations=entries,
    )


DEFINITIONS = (
    ToolDefinition(
        name="outcome_define",
        title="Define the outcome",
        description="Define what done means for a session of this agent: a title, optional detail, success criteria.",
        input_model=DefineArgs,
        output_model=DefineOutput,
        handler=outcome_define,
        read_only=False,
        effects=("session_write",),
        examples=(
            ToolExample(
                description="A release note outcome",
                input={"title": "Release notes drafted", "successCriteria": ["lists breaking changes"]},
            ),
        ),
    ),
    ToolDefinition(
        name="outcome_read",
        title="Read the outcome",
        description="A session's active outcome (title, detail, success criteria).",
        input_model=SessionArgs,
        output_model=ReadOutput,
        handler=outcome_read,
        effects=("session_read",),
    ),
    ToolDefinition(
        name="outcome_grade",
        title="Grade progress",
        description="Grade the outcome's criteria against what this session recorded in memory, with evidence and a "
        "next step.",
        input_model=SessionArgs,
        output_model=GradeOutput,
        handler=outcome_grade,
        effects=("session_read", "memory_read"),
    ),
    ToolDefinition(
        name="outcome_evaluate",
        title="Evaluate the outcome",
        description="Evaluate the outcome (pass/fail/not_ready/…, trend, promotion readiness) and record it.",
        input_model=EvaluateArgs,
        output_model=EvaluateOutput,
        handler=outcome_evaluate,
        read_only=False,
        effects=("session_read", "memory_read", "session_write"),
    ),
    ToolDefinition(
        name="outcome_history",
        title="Outcome history",
        description="The last evaluations of a session's outcome, oldest first, with iterations and trends.",
        input_model=HistoryArgs,
        output_model=HistoryOutput,
        handler=outcome_history,
        effects=("session_read",),
    ),
)
