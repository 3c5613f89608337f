"""The outcome gate: grade and evaluate a session's progress against its outcome, and gate promotions on it.

This is the outcome family's seam: other families import only this module (enforce_gate, posture, Evaluation).

The rubric (reference §4, adapted to a server without a harness; docs/outcomes.md explains it):
grade — missing_outcome | blocked | sleeping | in_progress | done_candidate; evaluation — missing_outcome | blocked |
not_ready | uncertain | fail | pass, and only `pass` is promotion-ready.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from managed_tools.stores import approvals, memory, outcomes, sessions, wake_requests
from managed_tools.stores import shell as shell_store
from managed_tools.stores.outcomes import Outcome
from managed_tools.tools.framework.calls.arguments import clip
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.retrieval import build_query, score_text
from managed_tools.tools.framework.wire.errors import Refused
from managed_tools.tools.framework.wire.models import NextTool, WireModel
from managed_tools.tools.shell import posture as shell_core
from managed_tools.tools.shell.rewrites import pending_shell_command, read_only_bash

GradeStatus = Literal["missing_outcome", "blocked", "sleeping", "in_progress", "done_candidate"]
EvalStatus = Literal["missing_outcome", "blocked", "not_ready", "uncertain", "fail", "pass"]
Confidence = Literal["low", "medium", "high"]
Trend = Literal["first_iteration", "improving", "stable", "regressing"]
CRITERION_MATCH_SCORE = 4
STATUS_SCORE: dict[str, int] = {
    "pass": 5,
    "uncertain": 4,
    "not_ready": 3,
    "blocked": 2,
    "fail": 1,
    "missing_outcome": 0,
}
GRADED_TARGETS = ("session_state", "working_buffer")
# Error kinds that are not failed work: the call never ran (bad arguments, an unknown tool, a passed deadline) or
# was refused by design (the gate or a precondition, a lost compare-and-swap, a person's decline or pause).
NOT_WORK = frozenset(
    {"invalid_arguments", "unknown_tool", "deadline", "refused", "conflict", "permission", "input_required",
     "requires_action", "handed_back"}
)  # fmt: skip
EVALUATE_TOOL = "outcome_evaluate"
COMMANDS_JUDGED = 50  # the newest commands of a session whose last runs an evaluation weighs


class OutcomeView(WireModel):
    title: str
    detail: str | None
    success_criteria: list[str]
    defined_at: str


class Grade(WireModel):
    status: GradeStatus
    confidence: Confidence
    summary: str
    matched_criteria: int
    total_criteria: int
    evidence: list[str]
    next_suggested_tool: NextTool | None


class Evaluation(WireModel):
    status: EvalStatus
    confidence: Confidence
    promotion_ready: bool
    trend: Trend
    trend_summary: str
    summary: str
    evidence: list[str]
    next_suggested_tool: NextTool | None


class HistoryEntry(WireModel):
    evaluated_at: str
    wake_id: str | None
    iteration: int
    outcome_title: str
    outcome_fingerprint: str
    grade_status: str
    evaluation: Evaluation


def outcome_view(outcome: Outcome | None) -> OutcomeView | None:
    if outcome is None:
        return None
    return OutcomeView(
        title=outcome.title,
        detail=outcome.detail,
        success_criteria=outcome.success_criteria,
        defined_at=outcome.defined_at,
    )


# ---- the rubric ----------------------------------------------------------------------------------------


async def grade(ctx: ToolContext, session_id: str, outcome: Outcome | None, gated: str | None = None) -> Grade:
    """`gated`: the promoting tool whose gate asks; its own pending approval (a 2026-07-28 client retrying with
    the person's answer) does not block it."""
    if outcome is None:
        return Grade(
            status="missing_outcome",
            confidence="high",
            summary="No outcome is defined for this session.",
            matched_criteria=0,
            total_criteria=0,
            evidence=[],
            next_suggested_tool=NextTool(
                tool="outcome_define", args={}, rationale="Say what done means before grading progress."
            ),
        )
    total = len(outcome.success_criteria)
    waiting = [
        r for r in await approvals.list_open(ctx.tx, session_id) if r.status == "pending" and r.tool_name != gated
    ]
    if waiting:
        first = waiting[0]
        shell_command = pending_shell_command([first], await shell_core.posture(ctx.runtime, ctx.tx, session_id))
        # Reference §4: a read-only allowlisted command waiting for approval is better run by `bash` right away.
        read_only = None if shell_command is None else read_only_bash(*shell_command)
        return Grade(
            status="blocked",
            confidence="high",
            summary=f"Waiting for a person: {first.tool_name} needs approval (request {first.id}).",
            matched_criteria=0,
            total_criteria=total,
            evidence=[f"pending {r.kind} request {r.id} for {r.tool_name}" for r in waiting[:5]],
            next_suggested_tool=read_only
            or NextTool(
                tool="permissions_check",
                args={"toolName": first.tool_name},
                rationale="See what the person must decide before work can go on.",
            ),
        )
    searchable = "\n".join([(await memory.read(ctx.tx, session_id, t)).content for t in GRADED_TARGETS])
    matched: list[str] = []
    evidence: list[str] = []
    for criterion in outcome.success_criteria:
        score, reasons = score_text(searchable, build_query(criterion))
        if score >= CRITERION_MATCH_SCORE:
            matched.append(criterion)
            evidence.append(f"criterion met in session memory: {criterion} ({', '.join(reasons)})")
        else:
            evidence.append(f"criterion not yet shown in session memory: {criterion}")
    sleeping = await _sleeping(ctx, session_id, len(matched), total, evidence)
    if sleeping is not None:
        return sleeping
    if total and len(matched) == total:
        return Grade(
            status="done_candidate",
            confidence="medium",
            summary=f"All {total} success criteria appear in the session's memory.",
            matched_criteria=total,
            total_criteria=total,
            evidence=evidence,
            next_suggested_tool=NextTool(
                tool="outcome_evaluate", args={}, rationale="Check the latest wake's tool results before promoting."
            ),
        )
    missing = [c for c in outcome.success_criteria if c not in matched]
    return Grade(
        status="in_progress",
        confidence="medium" if matched else "low",
        summary=(
            f"{len(matched)} of {total} success criteria appear in the session's memory."
            if total
            else "The outcome has no success criteria, so it can never be judged done; define some."
        ),
        matched_criteria=len(matched),
        total_criteria=total,
        evidence=evidence,
        next_suggested_tool=NextTool(
            tool="memory_write" if total else "outcome_define",
            args={"target": "session_state", "mode": "append"} if total else {},
            rationale=f"Record the work that meets: {missing[0]}" if missing else "Add success criteria.",
        ),
    )


async def _sleeping(ctx: ToolContext, session_id: str, matched: int, total: int, evidence: list[str]) -> Grade | None:
    """The session waits on a wake it scheduled (queued, or due and waiting for a client): it is asleep, not done."""
    found = await wake_requests.list_for(ctx.tx, session_id, statuses=wake_requests.WAITING, limit=3)
    if not found:
        return None
    first = found[0]
    when = f"due since {first.due_at}, waiting for a client" if first.status == "due" else f"until {first.due_at}"
    return Grade(
        status="sleeping",
        confidence="medium",
        summary=f"Sleeping {when}: {first.reason}",
        matched_criteria=matched,
        total_criteria=total,
        evidence=[f"{r.status} wake {r.id} at {r.due_at}: {r.reason}" for r in found] + evidence,
        next_suggested_tool=NextTool(
            tool="session_get_snapshot",
            args={"sessionId": session_id},
            rationale="Its queuedWakes say what it waits for.",
        ),
    )


WORKSPACE_EFFECTS = frozenset({"resource_read", "resource_write", "sandbox_execute"})
# A successful call with one of these effects is new evidence: after an evaluation has reported the open failures,
# it closes them (a memory write recording the fix, a file written, a command run).
EVIDENCE_EFFECTS = frozenset({"memory_write", "resource_write", "sandbox_execute"})


@dataclass(frozen=True)
class _Kind:
    workspace: bool  # works on the workspace
    reads: bool  # only reads
    evidence: bool  # a success is new evidence


def _kind_of(ctx: ToolContext, tool: str) -> _Kind:
    """What a tool's call says about the work; a tool no longer published counts as a writing one."""
    definition = ctx.runtime.registry.get(tool)
    if definition is None:
        return _Kind(workspace=False, reads=False, evidence=False)
    return _Kind(
        workspace=bool(WORKSPACE_EFFECTS.intersection(definition.effects)),
        reads=definition.read_only,
        evidence=not definition.read_only and bool(EVIDENCE_EFFECTS.intersection(definition.effects)),
    )


async def _latest_wake_spans(ctx: ToolContext, session_id: str) -> tuple[str | None, int, list[str]]:
    """(wake id, successful tool calls, tools with a failure still open) of the session's latest wake.

    Our wake is the whole connection, far longer than the reference's, so a failure is judged against the work
    done after it, not for ever: it is closed by a later success of the same tool, or by a later write or command
    on the workspace. Only failures that matter count: a read-only call that failed (a lookup of an unknown
    version, a missing file) changed nothing, and nothing but a correct lookup could fix it, so it never fails
    the outcome. Navigation and bookkeeping (sessions, outcomes, memory, plans, permissions) close nothing but
    their own failures, with one exception: once an evaluation has reported a failure, new evidence after it (a
    successful memory write, file write or command) closes it, so a later evaluation judges the new evidence
    rather than the old failure for ever. Calls refused before they ran (bad arguments, unknown tools, a passed
    deadline) and refusals by design (the outcome gate, a precondition, a lost compare-and-swap, a person's
    decline) were not work and never count.
    """
    wake = await sessions.latest_wake(ctx.tx, session_id)
    if wake is None:
        return None, 0, []
    field = ctx.tx.dialect.json_text
    rows = await ctx.tx.fetchall(
        f"SELECT {field('payload', 'toolName')} AS tool, {field('payload', 'result')} AS result, "
        f"{field('payload', 'errorKind')} AS kind FROM events WHERE wake_id = ? AND type = 'span.completed' "
        f"AND {field('payload', 'spanKind')} = 'tool' ORDER BY seq",
        (wake.id,),
    )
    open_failures: set[str] = set()
    reported: set[str] = set()  # open failures an evaluation has already shown
    ok = 0
    for row in rows:
        tool = row["tool"]
        kind = _kind_of(ctx, tool)
        if row["result"] == "error":
            if row["kind"] not in NOT_WORK and not kind.reads:
                open_failures.add(tool)
                reported.discard(tool)
            continue
        if row["result"] != "success":
            continue
        ok += 1
        open_failures.discard(tool)
        if tool == EVALUATE_TOOL:
            reported = set(open_failures)
        elif kind.evidence and reported:
            open_failures -= reported
            reported = set()
        if kind.workspace and not kind.reads:
            open_failures.clear()
    return wake.id, ok, sorted(open_failures)


async def failed_commands(ctx: ToolContext, session_id: str) -> list[shell_store.CommandRecord]:
    """The writable shells' commands whose newest run failed (a non-zero exit, a timeout, a kill): evidence
    against the criteria whatever the session's memory says, until the same command runs again and exits 0.
    The read-only `bash` hand is left out: a `grep` that finds nothing is a lookup, not failed work."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    failed = []
    for record in await shell_store.recent_commands(ctx.tx, session_id, COMMANDS_JUDGED):
        key = (record.command, tuple(record.args))
        if record.kind == "bash" or record.status == "running" or key in seen:
            continue
        seen.add(key)
        if record.status != "completed" or record.exit_code != 0:
            failed.append(record)
    return failed


def _command_failure(record: shell_store.CommandRecord) -> tuple[str, NextTool]:
    """What a failed command says, and the step that can fix it: the same command again, once its cause is fixed
    (shell_read_command shows the output)."""
    how = f"exited {record.exit_code}" if record.status == "completed" else record.status.replace("_", " ")
    command = clip(record.command, 120)
    summary = f"The session's command `{command}` {how} (command {record.id}) and has not run cleanly since."
    step = NextTool(
        tool="shell_exec" if record.kind == "persistent-shell" else "shell_run",
        args={"command": record.command},
        rationale=f"shell_read_command {{commandId: {record.id}}} shows why it failed; fix the cause, then run it "
        "again: a run that exits 0 is the evidence the criteria need.",
    )
    return summary, step


def _trend(status: EvalStatus, ready: bool, previous: HistoryEntry | None) -> tuple[Trend, str]:
    if previous is None:
        return "first_iteration", "First evaluation of this outcome."
    now = STATUS_SCORE[status] + int(ready)
    before = STATUS_SCORE[previous.evaluation.status] + int(previous.evaluation.promotion_ready)
    if now > before:
        return "improving", f"Improving: {previous.evaluation.status} → {status}."
    if now < before:
        return "regressing", f"Regressing: {previous.evaluation.status} → {status}."
    return "stable", f"Stable at {status} since iteration {previous.iteration}."


async def evaluate(
    ctx: ToolContext, session_id: str, gated: str | None = None
) -> tuple[Outcome | None, Grade, Evaluation, list[HistoryEntry]]:
    outcome = await outcomes.active(ctx.tx, session_id)
    graded = await grade(ctx, session_id, outcome, gated)
    history = [history_entry(r) for r in await outcomes.history(ctx.tx, session_id)]
    same = [h for h in history if outcome is not None and h.outcome_fingerprint == outcome.fingerprint]
    status: EvalStatus
    confidence: Confidence = graded.confidence
    evidence = list(graded.evidence)
    next_tool = graded.next_suggested_tool
    if graded.status in ("missing_outcome", "blocked"):
        status = graded.status
        summary = graded.summary
    elif graded.status in ("in_progress", "sleeping"):
        status, summary = "not_ready", graded.summary
    else:
        wake_id, ok, failed = await _latest_wake_spans(ctx, session_id)
        commands = await failed_commands(ctx, session_id)
        if commands:
            status, confidence = "fail", "high"
            summary, next_tool = _command_failure(commands[0])
            evidence.extend(_command_failure(c)[0] for c in commands[:3])
        elif failed:
            status, confidence = "fail", "high"
            summary = f"In the latest wake a call of {', '.join(failed)} failed and no later work made up for it."
            evidence.append(summary)
            next_tool = NextTool(
                tool=failed[0],
                args={},
                rationale="Its last call failed (session_get_trace shows the error): call it again with what the "
                "error asks for; a success, or a later write or command on the workspace, closes the failure.",
            )
        elif ok:
            status, confidence = "pass", "high" if graded.confidence != "low" else "medium"
            summary = f"All criteria met and the latest wake's {ok} tool call(s) succeeded."
            next_tool = None
        else:
            status, summary = "uncertain", "All criteria met, but the latest wake ran no tool calls to judge."
            next_tool = NextTool(tool="session_get_trace", args={"wakeId": wake_id}, rationale="Check the wake.")
    shell = await shell_core.posture(ctx.runtime, ctx.tx, session_id)
    if shell.busy_plan is not None and status not in ("missing_outcome", "blocked"):
        # The live-shell guard: work still running is not done, whatever the criteria say.
        status, summary = "not_ready", "A shell command of this session is still running."
        evidence.append(shell.busy_plan.rationale)
        next_tool = NextTool(tool="shell_wait", args=shell.busy_plan.args, rationale=shell.busy_plan.rationale)
    elif len(same) >= 2 and all(h.evaluation.status != "pass" for h in same[-3:]) and status != "pass":
        next_tool = NextTool(
            tool="outcome_history",
            args={"sessionId": session_id, "limit": min(len(same), 6)},
            rationale="Several evaluations without a pass: look at what changed between them.",
        )
    ready = status == "pass"
    trend, trend_summary = _trend(status, ready, same[-1] if same else None)
    evaluation = Evaluation(
        status=status,
        confidence=confidence,
        promotion_ready=ready,
        trend=trend,
        trend_summary=trend_summary,
        summary=summary,
        evidence=evidence[:12],
        next_suggested_tool=next_tool,
    )
    return outcome, graded, evaluation, history


def history_entry(record: outcomes.EvaluationRecord) -> HistoryEntry:
    return HistoryEntry(
        evaluated_at=record.evaluated_at,
        wake_id=record.wake_id,
        iteration=record.iteration,
        outcome_title=record.outcome_title,
        outcome_fingerprint=record.outcome_fingerprint,
        grade_status=record.grade_status,
        evaluation=Evaluation.model_validate(record.evaluation),
    )


class OutcomePosture(WireModel):
    """The outcome fields a snapshot and the permission tools report (reference §2a, §6)."""

    active_outcome: OutcomeView | None
    outcome_grade: GradeStatus | None
    outcome_status: EvalStatus | None
    outcome_trend: Trend | None
    outcome_trend_summary: str | None
    promotion_ready: bool
    outcome_evaluation: Evaluation | None
    next_outcome_step: NextTool | None
    outcome_evaluation_history_count: int
    outcome_evaluation_latest_iteration: int | None


async def posture(ctx: ToolContext, session_id: str) -> OutcomePosture:
    outcome, graded, evaluation, history = await evaluate(ctx, session_id)
    step = None
    if outcome is not None and not evaluation.promotion_ready:
        if evaluation.trend in ("stable", "regressing"):
            step = NextTool(
                tool="outcome_history",
                args={"sessionId": session_id},
                rationale=evaluation.trend_summary + " Look at the history before trying again.",
            )
        else:
            step = evaluation.next_suggested_tool or NextTool(
                tool="outcome_evaluate", args={}, rationale="Evaluate the outcome."
            )
    has = outcome is not None
    return OutcomePosture(
        active_outcome=outcome_view(outcome),
        outcome_grade=graded.status if has else None,
        outcome_status=evaluation.status if has else None,
        outcome_trend=evaluation.trend if has else None,
        outcome_trend_summary=evaluation.trend_summary if has else None,
        promotion_ready=evaluation.promotion_ready,
        outcome_evaluation=evaluation if has else None,
        next_outcome_step=step,
        outcome_evaluation_history_count=len(history),
        outcome_evaluation_latest_iteration=history[-1].iteration if history else None,
    )


async def enforce_gate(ctx: ToolContext, tool: str, require_outcome_pass: bool | None) -> Evaluation | None:
    """The outcome gate: `true` always enforces, `false` bypasses, omitted enforces only when an outcome exists.
    Returns the evaluation (for the tool's output) or raises Refused (a refusal by design) naming the next step."""
    if require_outcome_pass is False:
        return None
    outcome, _, evaluation, _ = await evaluate(ctx, ctx.session_id, gated=tool)
    if require_outcome_pass is None and outcome is None:
        return None
    if not evaluation.promotion_ready:
        step = evaluation.next_suggested_tool
        hint = f" Next tool: {step.tool} {json.dumps(step.args)}" if step else ""
        raise Refused(
            f"{tool} requires outcome_evaluate to return status=pass before promoting shared state. "
            f"Current status={evaluation.status}. Summary={evaluation.summary}{hint}"
        )
    return evaluation
