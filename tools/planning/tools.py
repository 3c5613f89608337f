"""The planning suite (seed 002 "Planning Tool Suite"): a session-scoped todo list.

`planning_setup_plan` creates or replaces the plan; the others need one. Step ids are increasing integers never
reused within the session (not even across a replaced plan); when every step is done the plan is completed.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from managed_tools.stores import plans
from managed_tools.stores.plans import Plan
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.models import Arguments, NoArguments, WireModel

Title = Annotated[str, Field(min_length=1, max_length=500, pattern=r"\S")]
StepStatus = Literal["pending", "in_progress", "done"]

MAX_STEP_ID = 2**53 - 1  # step ids are SQLite integers; past this no JSON reader holds one exactly


class StepView(WireModel):
    step_id: int
    title: str
    status: StepStatus


class PlanView(WireModel):
    objective: str
    status: Literal["active", "completed"]
    steps: list[StepView]
    pending: int
    in_progress: int
    done: int
    updated_at: str


class PlanOutput(WireModel):
    session_id: str
    plan: PlanView
    added_step_ids: list[int] = Field(default_factory=list)


def _view(ctx: ToolContext, plan: Plan, added: list[int] | None = None) -> PlanOutput:
    steps = [StepView(step_id=s.step_id, title=s.title, status=s.status) for s in plan.steps]
    view = PlanView(
        objective=plan.objective,
        status=plan.status,
        steps=steps,
        pending=sum(s.status == "pending" for s in steps),
        in_progress=sum(s.status == "in_progress" for s in steps),
        done=sum(s.status == "done" for s in steps),
        updated_at=plan.updated_at,
    )
    return PlanOutput(session_id=ctx.session_id, plan=view, added_step_ids=added or [])


class SetupArgs(Arguments):
    objective: Title
    initial_steps: Annotated[list[Title], Field(max_length=100)] = Field(default_factory=list)


async def planning_setup_plan(ctx: ToolContext, args: SetupArgs) -> PlanOutput:
    plan = await plans.setup(ctx.tx, ctx.session_id, args.objective.strip(), [t.strip() for t in args.initial_steps])
    return _view(ctx, plan, [s.step_id for s in plan.steps])


class AddArgs(Arguments):
    steps: Annotated[list[Title], Field(min_length=1, max_length=100)]


async def planning_add_step(ctx: ToolContext, args: AddArgs) -> PlanOutput:
    added = await plans.add_steps(ctx.tx, ctx.session_id, [t.strip() for t in args.steps])
    return _view(ctx, await plans.read(ctx.tx, ctx.session_id), added)


class UpdateArgs(Arguments):
    step_id: Annotated[int, Field(ge=1, le=MAX_STEP_ID)]
    title: Title | None = None
    status: StepStatus | None = None

    @model_validator(mode="after")
    def _something_to_change(self) -> UpdateArgs:
        if self.title is None and self.status is None:
            raise ValueError("give title, status or both")
        return self


async def planning_update_step(ctx: ToolContext, args: UpdateArgs) -> PlanOutput:
    title = None if args.title is None else args.title.strip()
    return _view(ctx, await plans.update_step(ctx.tx, ctx.session_id, args.step_id, title=title, status=args.status))


async def planning_read_plan(ctx: ToolContext, _: NoArguments) -> PlanOutput:
    return _view(ctx, await plans.read(ctx.tx, ctx.session_id))


DEFINITIONS = (
    ToolDefinition(
        name="planning_setup_plan",
        title="Set up a plan",
        description="Create or replace this session's plan: an objective and initial steps (titles <= 500 chars).",
        input_model=SetupArgs,
        output_model=PlanOutput,
        handler=planning_setup_plan,
        read_only=False,
        effects=("session_write",),
        examples=(
            ToolExample(
                description="A three-step plan",
                input={"objective": "Ship the fix", "initialSteps": ["reproduce", "fix", "test"]},
            ),
        ),
    ),
    ToolDefinition(
        name="planning_add_step",
        title="Add plan steps",
        description="Append steps to this session's plan; new ids continue the sequence.",
        input_model=AddArgs,
        output_model=PlanOutput,
        handler=planning_add_step,
        read_only=False,
        effects=("session_write",),
    ),
    ToolDefinition(
        name="planning_update_step",
        title="Update a plan step",
        description="Change a step's title or status (pending, in_progress, done); all done completes the plan.",
        input_model=UpdateArgs,
        output_model=PlanOutput,
        handler=planning_update_step,
        read_only=False,
        effects=("session_write",),
    ),
    ToolDefinition(
        name="planning_read_plan",
        title="Read the plan",
        description="Read this session's plan with each step's id, title and status.",
        input_model=NoArguments,
        output_model=PlanOutput,
        handler=planning_read_plan,
        effects=("session_read",),
    ),
)
