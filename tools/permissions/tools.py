"""`permissions_check` and `permissions_describe` (reference §6): the permission posture, without side effects.

The shell posture (reference §6) comes from the shell hand's state: whether the persistent shell is live or busy,
its busy and recovery plans, and for a shell command the read-first alternatives that need no approval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from managed_tools.stores import approvals
from managed_tools.stores.approvals import ApprovalRecord
from managed_tools.tools.framework.calls.arguments import ArgumentError, approval_digest, parse_call
from managed_tools.tools.framework.calls.permission import argument_secrets, env_secrets
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolEffect, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import (
    Arguments,
    JsonObject,
    NextTool,
    NoArguments,
    NonEmptyStr,
    WireModel,
)
from managed_tools.tools.outcomes.gate import Evaluation, OutcomePosture, posture
from managed_tools.tools.shell import posture as shell_core
from managed_tools.tools.shell.rewrites import (
    SHELL_COMMANDS,
    alternatives,
    first_class,
    pending_shell_command,
    planned_command,
    planned_cwd,
    read_first_menu,
    read_only_bash,
)

# The tools whose effect on shared state needs a passing outcome evaluation (reference §5, "Outcome gate").
OUTCOME_GATED = frozenset({"memory_promote_note", "resources_promote_to_substrate", "resources_restore_version"})
# The tools whose call changes the shell (reference §6): they get the shell mutation posture.
SHELL_MUTATION = frozenset(
    {"shell_set_cwd", "shell_set_env", "shell_unset_env", "shell_open", "shell_restart", "shell_run", "shell_exec",
     "shell_close"}
)  # fmt: skip
BRIEF = {"shell_id", "status", "cwd", "busy"}  # of a shell view, in permissions_check
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
    shell = await shell_core.posture(ctx.runtime, ctx.tx, ctx.session_id)
    pending = pending_shell_command(records, shell)
    steps = [] if pending is None else alternatives(*pending)
    bash_step = None if pending is None else read_only_bash(*pending)
    return DescribeOutput(
        outcome_evaluation=outcome.outcome_evaluation,
        next_outcome_step=outcome.next_outcome_step,
        shell_mutation_posture=_mutation_posture(shell),
        read_only_alternative=bash_step,
        shell_read_first_alternatives=read_first_menu(shell),
        next_shell_step=shell.next_step or (steps[0] if steps else None),
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
        JsonObject | None, Field(description="Arguments to check, as JSON: are they valid, and are they approved?")
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
    # remembered (approved for the session) and auto_sandboxed (--auto-sandboxed): it runs without a question
    approval_state: Literal["none", "pending", "approved", "remembered", "auto_sandboxed"] | None
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
    mutates_shell = definition.name in SHELL_MUTATION
    # A preflight answers with its tool (issue 38, item 15): the outcome only for a tool the gate holds, the
    # shell in brief (shell_describe and permissions_describe show the whole posture).
    outcome = await posture(ctx, ctx.session_id) if gated else None
    shell = await shell_core.posture(ctx.runtime, ctx.tx, ctx.session_id) if mutates_shell else None
    command = planned_command(args.tool_args) if definition.name in SHELL_COMMANDS else ""
    cwd = planned_cwd(args.tool_args or {}, shell) if shell is not None else "/workspace"
    rewrite = first_class(command, cwd) if command else None
    bash_step = read_only_bash(command, cwd) if command else None
    valid: bool | None = None
    errors = digest = None
    state: Literal["none", "pending", "approved", "remembered", "auto_sandboxed"] | None = None
    request_id = None
    gap: str | None = None
    credential = False  # in the arguments or the env: such a call always asks, --auto-sandboxed or not
    if args.tool_args is not None:
        try:
            parsed, canonical, digest = parse_call(definition, args.tool_args)
            asks = definition.asks(parsed)
            gap = "" if definition.contained is None else definition.contained(ctx, parsed)
            credential = bool(argument_secrets(ctx.runtime, definition, canonical))
            if definition.run_context is not None:  # the digest an approval of it binds: command, cwd and env
                what = await definition.run_context(ctx, parsed)
                digest = approval_digest(definition, canonical, what)
                credential = credential or bool(env_secrets(ctx.runtime, definition, what))
            valid = True
        except ArgumentError as exc:
            valid, errors = False, str(exc)
        except ToolError as exc:
            valid, errors, digest = False, str(exc), None
    if digest is not None and asks:
        match = next((r for r in records if r.tool_name == definition.name and r.args_digest == digest), None)
        state = "none" if match is None else match.status  # type: ignore[assignment]  # open = pending|approved
        request_id = None if match is None else match.id
        remembered = await approvals.remembered(ctx.tx, ctx.session_id, definition.name, digest)
        if state == "none" and remembered is not None:
            state, request_id, asks = "remembered", remembered.id, False
        elif state == "none" and ctx.runtime.auto_sandboxed and gap is None and not credential:
            state, asks = "auto_sandboxed", False
    shell_steps = ShellSteps(rewrite, bash_step, shell, definition.name in SHELL_COMMANDS)
    return CheckOutput(
        outcome_evaluation=None if outcome is None else outcome.outcome_evaluation,
        next_outcome_step=None if outcome is None else outcome.next_outcome_step,
        shell_mutation_posture=None if shell is None else _mutation_posture(shell, brief=True),
        read_only_alternative=bash_step,
        shell_read_first_alternatives=[] if shell is None else read_first_menu(shell, rewrite),
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
        next_step=_next_step(definition, args.tool_args, state, request_id, outcome, asks=asks, shell=shell_steps),
    )


def _next_step(
    definition: ToolDefinition,
    tool_args: dict[str, Any] | None,
    state: str | None,
    request_id: str | None,
    outcome: OutcomePosture | None,
    *,
    asks: bool,
    shell: ShellSteps,
) -> NextTool | None:
    if state == "approved":
        return NextTool(
            tool=definition.name,
            args=tool_args or {},
            rationale=f"Request {request_id} is approved: call it with exactly these arguments; it runs once.",
        )
    if state in ("remembered", "auto_sandboxed"):
        why = "a person approved it for this session" if state == "remembered" else "it stays inside the sandbox"
        return NextTool(tool=definition.name, args=tool_args or {}, rationale=f"It runs without a question: {why}.")
    step = shell.next_step(definition.name)
    if step is not None:
        return step
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
    if asks:
        return NextTool(
            tool="permissions_describe",
            args={},
            rationale="Calling it asks a person to approve these exact arguments first.",
        )
    return None


def _mutation_posture(shell: shell_core.ShellPosture, *, brief: bool = False) -> dict[str, Any]:
    """`brief`: the live shell's id, status, cwd and busy flag, not its env names and history."""
    last, view = shell.last_command, shell.persistent_shell
    shown = None if view is None else view.model_dump(mode="json", include=BRIEF if brief else None, by_alias=True)
    return {
        "persistentShell": shown,
        "lastCommandPreview": None if last is None else f"{last.command[:120]} (exit {last.exit_code})",
        "busyPlan": None if shell.busy_plan is None else shell.busy_plan.model_dump(mode="json"),
        "recoveryPlan": None if shell.recovery_plan is None else shell.recovery_plan.model_dump(mode="json"),
    }


@dataclass(frozen=True)
class ShellSteps:
    """The shell part of permissions_check's next step, in the reference's order."""

    rewrite: NextTool | None
    bash: NextTool | None
    posture: shell_core.ShellPosture | None
    runs_commands: bool

    def next_step(self, tool: str) -> NextTool | None:
        if self.rewrite is not None:
            return self.rewrite
        if self.bash is not None:
            return self.bash
        if self.posture is None:
            return None
        plan = self.posture.busy_plan
        if plan is not None:
            return NextTool(tool=plan.tool, args=plan.args, rationale=plan.rationale)
        if tool == "shell_exec" and self.posture.recovery_plan is not None:
            return self.posture.recovery_plan
        if self.runs_commands:
            return NextTool(tool="shell_describe", args={}, rationale="See the shell's cwd, env and last commands.")
        return None


DEFINITIONS = (
    ToolDefinition(
        name="permissions_describe",
        title="Describe permissions",
        description="This session's permission posture: waiting requests, always_ask and outcome-gated "
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
        description="Check a tool before calling it: policy, effects, whether its arguments are valid and approved, "
        "and the next step.",
        input_model=CheckInput,
        output_model=CheckOutput,
        handler=permissions_check,
        effects=("session_read",),
        idempotent=True,
        examples=(
            ToolExample(
                description="Is this call approved yet?",
                input={"toolName": "session_get_events", "toolArgs": '{"limit": 5}'},
            ),
        ),
    ),
)
