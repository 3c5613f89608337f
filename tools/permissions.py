"""`permissions_check` and `permissions_describe` (reference §6): the permission posture, without side effects.

Outcome and shell posture fields are part of the contract already and stay `null` until the outcome and shell
stores exist.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from stores import approvals
from stores.approvals import ApprovalRecord
from tools.context import ToolContext
from tools.definition import ToolDefinition, ToolEffect, ToolExample
from tools.executor import ArgumentError, parse_call
from tools.models import Arguments, NextTool, NoArguments, NonEmptyStr, WireModel
from tools.outcome_tools import Evaluation, OutcomePosture, posture

# The tools whose effect on shared state needs a passing outcome evaluation (reference §5, "Outcome gate").
OUTCOME_GATED = frozenset({"memory_promote_note", "resources_promote_to_substrate", "resources_restore_version"})
HOW_TO_APPROVE = (
    "A person answers in the client when it can show the question; otherwise they run `managed-tools pending` and "
    "`managed-tools approve ID` (or `deny ID`) in a terminal, and the model calls the tool again with exactly the "
    "same arguments. An approval runs once."
)


class RequestView(WireModel):
    request_id: str
    kind: Literal["tool_confirmation", "custom_tool"]
    tool_name: str
    status: Literal["pending", "approved"]
    args_digest: str
    arguments: dict[str, Any]
    requested_at: str


class ToolPosture(WireModel):
    name: str
    ownership: str
    effects: list[ToolEffect]
    read_only: bool
    requires_outcome_pass: bool


def _view(record: ApprovalRecord) -> RequestView:
    assert record.status in ("pending", "approved")
    return RequestView(
        request_id=record.id,
        kind=record.kind,
        tool_name=record.tool_name,
        status=record.status,
        args_digest=record.args_digest,
        arguments=record.arguments,
        requested_at=record.requested_at,
    )


def _oldest(records: list[ApprovalRecord], kind: str, tool: str | None = None) -> RequestView | None:
    for record in records:
        if record.kind == kind and record.status == "pending" and (tool is None or record.tool_name == tool):
            return _view(record)
    return None


def _posture(definition: ToolDefinition) -> ToolPosture:
    return ToolPosture(
        name=definition.name,
        ownership=definition.ownership,
        effects=list(definition.effects),
        read_only=definition.read_only,
        requires_outcome_pass=definition.name in OUTCOME_GATED,
    )


class PostureFields(WireModel):
    """The outcome posture, and the shell posture (filled by the shell issue; part of the contract now)."""

    outcome_evaluation: Evaluation | None = None
    next_outcome_step: NextTool | None = None
    context_pressure: dict[str, Any] | None = None
    shell_mutation_posture: dict[str, Any] | None = None
    read_only_alternative: NextTool | None = None
    shell_read_first_alternatives: list[NextTool] = Field(default_factory=list)


# ---- permissions_describe ----------------------------------------------------------------------------


class DescribeOutput(PostureFields):
    session_id: str
    pending_tool_confirmation_request: RequestView | None
    pending_custom_tool_request: RequestView | None
    open_requests: list[RequestView]
    always_ask_tools: list[ToolPosture]
    outcome_gated_tools: list[ToolPosture]
    next_shell_step: NextTool | None = None
    how_to_approve: str


async def permissions_describe(ctx: ToolContext, _: NoArguments) -> DescribeOutput:
    records = await approvals.list_open(ctx.tx, ctx.session_id)
    registry = ctx.runtime.registry
    outcome = await posture(ctx, ctx.session_id)
    return DescribeOutput(
        outcome_evaluation=outcome.outcome_evaluation,
        next_outcome_step=outcome.next_outcome_step,
        session_id=ctx.session_id,
        pending_tool_confirmation_request=_oldest(records, "tool_confirmation"),
        pending_custom_tool_request=_oldest(records, "custom_tool"),
        open_requests=[_view(r) for r in records],
        always_ask_tools=[_posture(d) for d in registry if d.permission_policy == "always_ask"],
        outcome_gated_tools=[_posture(d) for d in registry if d.name in OUTCOME_GATED],
        how_to_approve=HOW_TO_APPROVE,
    )


# ---- permissions_check -------------------------------------------------------------------------------


class CheckInput(Arguments):
    tool_name: NonEmptyStr = Field(description="The tool to check.")
    tool_args: Annotated[
        dict[str, Any] | None, Field(description="Arguments to check: are they valid, and are they approved?")
    ] = None


class CheckOutput(PostureFields):
    tool_name: str
    exists: bool
    allowed: bool
    near_names: list[str]
    permission_policy: Literal["always_allow", "always_ask"] | None
    requires_confirmation: bool
    requires_outcome_pass: bool
    ownership: str | None
    effects: list[ToolEffect]
    read_only: bool | None
    destructive: bool | None
    interrupt_behavior: Literal["cancel", "block"] | None
    args_valid: bool | None
    argument_errors: str | None
    args_digest: str | None
    approval_state: Literal["none", "pending", "approved"] | None
    approval_request_id: str | None
    pending_tool_confirmation_request: RequestView | None
    next_step: NextTool | None


async def permissions_check(ctx: ToolContext, args: CheckInput) -> CheckOutput:
    registry = ctx.runtime.registry
    definition = registry.get(args.tool_name)
    records = await approvals.list_open(ctx.tx, ctx.session_id)
    if definition is None:
        return CheckOutput(
            tool_name=args.tool_name,
            exists=False,
            allowed=False,
            near_names=registry.near_names(args.tool_name),
            permission_policy=None,
            requires_confirmation=False,
            requires_outcome_pass=False,
            ownership=None,
            effects=[],
            read_only=None,
            destructive=None,
            interrupt_behavior=None,
            args_valid=None,
            argument_errors=None,
            args_digest=None,
            approval_state=None,
            approval_request_id=None,
            pending_tool_confirmation_request=None,
            next_step=None,
        )
    asks = definition.permission_policy == "always_ask"
    gated = definition.name in OUTCOME_GATED
    outcome = await posture(ctx, ctx.session_id) if gated else None
    valid: bool | None = None
    errors = digest = None
    state: Literal["none", "pending", "approved"] | None = None
    request_id = None
    if args.tool_args is not None:
        try:
            _, _, digest = parse_call(definition, args.tool_args)
            valid = True
        except ArgumentError as exc:
            valid, errors = False, str(exc)
    if digest is not None and asks:
        match = next((r for r in records if r.tool_name == definition.name and r.args_digest == digest), None)
        state = "none" if match is None else match.status  # type: ignore[assignment]  # open = pending|approved
        request_id = None if match is None else match.id
    return CheckOutput(
        outcome_evaluation=None if outcome is None else outcome.outcome_evaluation,
        next_outcome_step=None if outcome is None else outcome.next_outcome_step,
        tool_name=definition.name,
        exists=True,
        allowed=True,
        near_names=[],
        permission_policy=definition.permission_policy,
        requires_confirmation=asks,
        requires_outcome_pass=definition.name in OUTCOME_GATED,
        ownership=definition.ownership,
        effects=list(definition.effects),
        read_only=definition.read_only,
        destructive=definition.destructive,
        interrupt_behavior=definition.interrupt_behavior,
        args_valid=valid,
        argument_errors=errors,
        args_digest=digest,
        approval_state=state,
        approval_request_id=request_id,
        pending_tool_confirmation_request=_oldest(records, "tool_confirmation", definition.name),
        next_step=_next_step(definition, args.tool_args, state, request_id, outcome),
    )


def _next_step(
    definition: ToolDefinition,
    tool_args: dict[str, Any] | None,
    state: str | None,
    request_id: str | None,
    outcome: OutcomePosture | None,
) -> NextTool | None:
    if state == "approved":
        return NextTool(
            tool=definition.name,
            args=tool_args or {},
            rationale=f"Request {request_id} is approved: call it with exactly these arguments; it runs once.",
        )
    if outcome is not None and outcome.outcome_status is not None and not outcome.promotion_ready:
        step = outcome.next_outcome_step
        if step is not None:
            return NextTool(tool=step.tool, args=step.args, rationale="The outcome gate is closed: " + step.rationale)
    if state == "pending":
        return NextTool(
            tool="permissions_describe",
            args={},
            rationale=f"Request {request_id} waits for a person; {HOW_TO_APPROVE}",
        )
    if definition.permission_policy == "always_ask":
        return NextTool(
            tool="permissions_describe",
            args={},
            rationale="Calling it asks a person to approve these exact arguments first.",
        )
    return None


DEFINITIONS = (
    ToolDefinition(
        name="permissions_describe",
        title="Describe permissions",
        description="Show this session's permission posture: waiting requests, always_ask and outcome-gated "
        "tools, and how a person approves.",
        input_model=NoArguments,
        output_model=DescribeOutput,
        handler=permissions_describe,
        effects=("session_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="permissions_check",
        title="Check a tool's permissions",
        description="Check one tool before calling it: policy, effects, whether these arguments are valid and "
        "already approved, and the next step.",
        input_model=CheckInput,
        output_model=CheckOutput,
        handler=permissions_check,
        effects=("session_read",),
        idempotent=True,
        examples=(
            ToolExample(
                description="Is this call approved yet?",
                input={"toolName": "session_get_events", "toolArgs": {"limit": 5}},
            ),
        ),
    ),
)
