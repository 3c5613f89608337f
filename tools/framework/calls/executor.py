"""The executor: the one path every tool call takes (docs/architecture.md §3, seed 002 "Runtime Dispatch").

1 lookup, 2 parse (extra="forbid"), 3 deadline, 4 permission, 5 context, 6 handler inside a transaction
(rolled back on failure), 7 span events, 8 result shaping. Every outcome, including refusals before the
handler runs, is written as `span.started` / `span.completed` events before the result is returned.

The steps live beside it: permission.py (4), call.py (the parsed call and its context, 5), span.py (7),
result_shaping.py (8), fulfilment.py (a tool a model or a person implements), call_result.py (the result).
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from managed_tools.sandbox.paths import PathEscape
from managed_tools.stores import substrate, usage
from managed_tools.stores.db import NoTransaction, Tx
from managed_tools.stores.errors import DatabaseUnwritableError, PreconditionError, StoreError
from managed_tools.tools.framework.calls import output_check, variables
from managed_tools.tools.framework.calls.arguments import ArgumentError, clip, parse_call, without_hidden
from managed_tools.tools.framework.calls.call import Approved, Call, call_context
from managed_tools.tools.framework.calls.call_result import CallResult, Refusal
from managed_tools.tools.framework.calls.fulfilment import custom_output, fulfil_latent
from managed_tools.tools.framework.calls.permission import argument_secrets, ask, confirm
from managed_tools.tools.framework.calls.result_shaping import compacted, preview, success, withhold
from managed_tools.tools.framework.calls.span import Span, record_refusal, write_completed
from managed_tools.tools.framework.context import telemetry
from managed_tools.tools.framework.context.budget import BudgetExceededError, BudgetTracker, session_over
from managed_tools.tools.framework.context.context import Attachment, Ports, Runtime, ToolContext
from managed_tools.tools.framework.context.ports import SamplingUnavailableError
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.registry import Visible
from managed_tools.tools.framework.wire import redaction, secret_scan
from managed_tools.tools.framework.wire.errors import Refused, ToolError
from managed_tools.tools.framework.wire.models import Arguments, Formatted

log = logging.getLogger("managed_tools.executor")

MAX_NAME_CHARS = 64
UNKNOWN_TOOL = telemetry.UNKNOWN


async def execute(
    runtime: Runtime,
    attachment: Attachment,
    ports: Ports,
    name: str,
    arguments: Any,
    *,
    timeout_seconds: float | None = None,
    visible: Visible | None = None,
) -> CallResult:
    """Run one tool call to completion and return its shaped result. Never raises for a tool's failure.

    A tool `visible` refuses is unknown to this caller, and never named among the near names."""
    definition = runtime.registry.get(name)
    if definition is None or (visible is not None and not visible(definition)):
        # Traced under one name: a client's made-up names must not become a metric series each.
        with telemetry.tool_call(UNKNOWN_TOOL) as observed:
            span = Span(runtime, attachment, clip(name, MAX_NAME_CHARS))
            unknown = CallResult("error", _unknown_tool_message(runtime, name, visible), error_kind="unknown_tool")
            return observed.ended(await record_refusal(span, unknown, arguments))
    with telemetry.tool_call(definition.name, definition.ownership) as observed:
        return observed.ended(
            await _execute(
                runtime, attachment, ports, definition, arguments, timeout_seconds=timeout_seconds, visible=visible
            )
        )


async def execute_routed(ctx: ToolContext, definition: ToolDefinition, arguments: dict[str, Any]) -> CallResult:
    """A call a routing tool makes for its caller (sandbox_execute's actions): the same path as the caller's own
    calls, under `definition`'s name (its policy and permission pause, its events), with the caller's session,
    ports (a person's answers), scopes and the time the routing call has left. The router checks beforehand that
    the tool is served and that the caller may use it."""
    left = ctx.deadline - anyio.current_time()
    with telemetry.tool_call(definition.name, definition.ownership) as observed:
        return observed.ended(
            await _execute(
                ctx.runtime, ctx.attachment, ctx.ports, definition, arguments, timeout_seconds=left, visible=ctx.may_use
            )
        )


class Routed(Refusal):
    """Raised by a routing tool's handler whose routed call did not succeed: its result (a refusal, a permission
    pause with its action, an error) becomes the routing call's own."""

    def __init__(self, result: CallResult) -> None:
        super().__init__(result.error_kind or "tool_error", result.text, result.status, result.action_required)


async def _execute(
    runtime: Runtime,
    attachment: Attachment,
    ports: Ports,
    definition: ToolDefinition,
    arguments: Any,
    *,
    timeout_seconds: float | None,
    visible: Visible | None,
) -> CallResult:
    span = Span(runtime, attachment, clip(definition.name, MAX_NAME_CHARS))
    try:
        args, canonical, digest = parse_call(definition, arguments)
    except ArgumentError as exc:
        return await record_refusal(span, CallResult("error", str(exc), error_kind="invalid_arguments"), arguments)
    span.summarize_result = not definition.read_only and not definition.hidden_args
    span.arg_chars = len(json.dumps(canonical, separators=(",", ":"), ensure_ascii=False))
    found = argument_secrets(runtime, definition, canonical)

    span.start(
        {
            "ownership": definition.ownership,
            "permissionPolicy": definition.permission_policy,
            "argsDigest": digest,
            "args": preview(secret_scan.mask(without_hidden(definition, canonical), found)),
        }
    )
    span.argument_secrets = tuple(secret_scan.kinds(found)) if found else ()
    if not _only_reads(definition, args) or found:
        try:
            await span.flush_started()
        except DatabaseUnwritableError as exc:
            # Without an audit record the call must not run at all.
            return CallResult("error", str(exc), error_kind=exc.kind)

    try:
        timeout = definition.timeout_seconds
        if timeout_seconds is not None:
            timeout = min(timeout, timeout_seconds)
        budget_seconds = runtime.budgets.per_call.seconds
        if budget_seconds is not None and budget_seconds < timeout:
            timeout, budgeted = budget_seconds, True
        else:
            budgeted = False
        if runtime.budgets.configured:
            async with runtime.db.read() as tx:
                used, shared = await usage.read_limiting(tx, attachment.session_id)
            span.budget = BudgetTracker(runtime.budgets, used, shared=shared)
        call = Call(
            definition, args, canonical, digest, ports, span, timeout, visible, budgeted, argument_secrets=found
        )
        result = await _run(call)
    except BaseException:
        # Cancelled by the client (or the process is going down): record it, shielded, then re-raise.
        if not span.completed:
            with anyio.CancelScope(shield=True):
                cancelled = CallResult("cancelled", "The call was cancelled.", error_kind="internal")
                await write_completed(span, cancelled)
        raise
    return result


def _only_reads(definition: ToolDefinition, args: Arguments) -> bool:
    """Does this call only read the state in its own snapshot (no effect, no person to wait for, no variable to
    gather, no model to ask)? Then its record is written after it ran, both events in one round trip, and its
    answer waits for that record (docs/decisions/one-round-trip-per-call.md)."""
    return (
        definition.read_only
        and definition.handler is not None
        and not definition.own_transactions
        and not definition.variables
        and not definition.asks(args)
        and definition.asks_because is None
    )


async def _run(call: Call) -> CallResult:
    definition, span, runtime = call.definition, call.span, call.span.runtime
    try:
        _may_start(call)
        await _gather(call)
        if definition.handler is None:
            if definition.ownership == "latent":
                with anyio.fail_after(call.timeout):
                    result = success(await fulfil_latent(call))
            elif definition.ownership == "custom":
                # A person is the implementation of a custom tool: their answer, once valid, is the result.
                result = success(custom_output(call, (await ask(call, "custom_tool")).value))
            else:
                raise Refusal(
                    "tool_error", f"{definition.name} has no implementation on this server and cannot be run here."
                )
            result = withhold(definition, call.redact(result))  # an answer may quote a secret it was given
            return await write_completed(span, result)
        _check_ready(call)
        await _check_precondition(call)
        approved = await confirm(call)
        # One scope for both the shield and the timeout (fail_after would be a second): a shielded scope still ends
        # at its own deadline, and it catches only that (a client's cancel from outside goes on through it).
        shield = definition.interrupt_behavior == "block"
        with anyio.CancelScope(shield=shield, deadline=anyio.current_time() + call.timeout) as scope:
            if definition.own_transactions:
                result = await _call_handler(call, NoTransaction(), approved)
                result = await write_completed(span, result)
            elif definition.read_only:
                async with runtime.db.read() as tx:
                    result = await _call_handler(call, tx, approved)
                result = await write_completed(span, result)
            else:
                async with runtime.db.write() as tx:
                    result = await _call_handler(call, tx, approved)
                    # Committed with the handler's writes: the effect and its audit record land together.
                    await span.write_completed(tx, result)
                span.completed = True
        if scope.cancelled_caught:
            raise TimeoutError
        return result
    except Refusal as refusal:
        result = CallResult(refusal.status, str(refusal), error_kind=refusal.kind, action_required=refusal.action)
    except ToolError as exc:
        result = CallResult("error", str(exc), error_kind="refused" if isinstance(exc, Refused) else "tool_error")
    except DatabaseUnwritableError as exc:
        result = CallResult("error", f"{exc} {definition.name} made no changes.", error_kind=exc.kind)
    except PathEscape as exc:
        result = CallResult("error", str(exc), error_kind="sandbox_refused")
    except (StoreError, SamplingUnavailableError) as exc:
        # A lost compare-and-swap (another writer won; nothing changed) is a conflict, not failed work.
        conflict = isinstance(exc, PreconditionError)
        result = CallResult("error", str(exc), error_kind="conflict" if conflict else "tool_error")
    except TimeoutError:
        result = _stopped(call)
    except Exception as exc:
        trace = "".join(traceback.format_exception(exc))
        log.error("tool %s failed:\n%s", definition.name, redaction.scrub(trace))
        result = CallResult(
            "error",
            f"{definition.name} failed unexpectedly ({type(exc).__name__}); {_undone(definition)}. "
            "The server log has the details.",
            error_kind="internal",
        )
    return await write_completed(span, call.redact(result))


def _may_start(call: Call) -> None:
    """Step 3: a call past its deadline, or of a session that has used its budget (config.json
    budgets.perSession), is refused before anything runs."""
    if call.timeout <= 0:
        raise Refusal("deadline", f"The deadline for {call.definition.name} had already passed; it was not run.")
    over = session_over(call.span.runtime.budgets.per_session, call.span.budget.used_before)
    if over is not None:
        whose = "This session and the sessions it was delegated from share one budget, and have used it"
        raise Refusal(
            "budget",
            f"{whose if call.span.budget.shared else 'This session has used its budget'} ({over}), so "
            f"{call.definition.name} was not run. A person can raise config.json budgets.perSession; a new session "
            "starts with a fresh budget.",
            "blocked",
        )


def _over_budget(call: Call, exc: BudgetExceededError) -> Refusal:
    return Refusal(
        "budget",
        f"{call.definition.name} was refused: {exc}; {_undone(call.definition)}. Ask for less (a limit, a section "
        "or field filter), or a person can raise config.json budgets.perCall.tokens.",
        "blocked",
    )


def _stopped(call: Call) -> CallResult:
    """A call that ran out of time: at its per-call time budget (a refusal by design), or at its timeout."""
    name, undone = call.definition.name, _undone(call.definition)
    if call.budgeted:
        return CallResult(
            "blocked",
            f"{name} was stopped at its per-call time budget of {call.timeout:g} s (config.json "
            f"budgets.perCall.seconds); {undone}.",
            error_kind="budget",
        )
    return CallResult("error", f"{name} did not finish within {call.timeout:g} s and was stopped; {undone}.",
                      error_kind="timeout")  # fmt: skip


def _check_ready(call: Call) -> None:
    """What the handler needs is up before anyone is asked: an approval given for an upstream tool whose server is
    still starting would be spent on an answer that it is starting (docs/upstream.md)."""
    if call.definition.ready is None:
        return
    try:
        call.definition.ready()
    except ToolError as exc:
        raise Refusal("tool_error", str(exc)) from None


async def _check_precondition(call: Call) -> None:
    """A tool's own check before anything runs or anyone is asked; its refusal is by design, not failed work."""
    if call.definition.precondition is None:
        return
    async with call.span.runtime.db.read() as tx:
        try:
            await call.definition.precondition(call_context(call, tx), call.args)
        except ToolError as exc:
            raise Refusal("refused", str(exc)) from None


async def _gather(call: Call) -> None:
    """The tool's variables, before anything runs; a required one nobody gives stops the call here."""
    if not call.definition.variables:
        return
    try:
        runtime, attachment = call.span.runtime, call.span.attachment
        call.values.update(await variables.gather(runtime, attachment, call.ports.variables, call.definition))
        redaction.KNOWN.add(variables.secret_values(call.definition, call.values))
    except variables.Missing as missing:
        raise Refusal(missing.kind, str(missing), "blocked", missing.action) from None


def _undone(definition: ToolDefinition) -> str:
    """What a stopped call leaves: one transaction is undone whole, a tool with its own commits as it went."""
    return "what it had already recorded stays" if definition.own_transactions else "nothing it started was kept"


@asynccontextmanager
async def reading_context(runtime: Runtime, attachment: Attachment, ports: Ports) -> AsyncIterator[ToolContext]:
    """A read-only context outside any tool call (resources read through the same code as the tools)."""
    async with runtime.db.read() as tx:
        yield ToolContext(
            runtime=runtime,
            attachment=attachment,
            ports=ports,
            tx=tx,
            deadline=anyio.current_time() + 30,
            log=logging.getLogger("managed_tools.resources"),
        )


async def _substrate_current(runtime: Runtime, tx: Tx) -> None:
    """On PostgreSQL, this replica's substrate files brought up to the heads another replica promoted, before any
    handler reads them (in the call's own transaction; a handler with transactions of its own gets a read)."""
    if runtime.db.dialect.name != "postgresql":
        return
    mount = next(m for m in runtime.guard.mounts if m.kind == "agent_substrate")
    if isinstance(tx, NoTransaction):
        async with runtime.db.read() as own:
            await substrate.refresh_copies(runtime.db, own, mount, runtime.environment.agent_id)
    else:
        await substrate.refresh_copies(runtime.db, tx, mount, runtime.environment.agent_id)


async def _call_handler(call: Call, tx: Tx, approved: Approved) -> CallResult:
    definition = call.definition
    assert definition.handler is not None
    ctx = call_context(call, tx, approved)
    await _substrate_current(ctx.runtime, tx)
    try:
        output = await definition.handler(ctx, call.args)
    except BudgetExceededError as exc:  # a model it ran spent more than the call may (ctx.budget.charge)
        raise _over_budget(call, exc) from None
    if not isinstance(output, definition.output_model):
        raise TypeError(f"{definition.name} returned {type(output).__name__}, not {definition.output_model.__name__}")
    content = tuple(definition.render(output)) if definition.render is not None else ()
    structured = output.model_dump(mode="json", by_alias=True)
    output_check.check(definition, structured)  # debug mode only (output_check.py)
    result = withhold(definition, call.redact(success(structured, content, ctx)))
    chosen = call.args.format if isinstance(call.args, Formatted) else None
    if (chosen or ctx.runtime.result_format) == "compact":
        result = compacted(result)
    try:  # inside the transaction: a result over the budget undoes the call (what is withheld never reaches it)
        call.span.budget.check_call(call.span.arg_chars + result.visible_chars())
    except BudgetExceededError as exc:
        raise _over_budget(call, exc) from None
    return result


def _unknown_tool_message(runtime: Runtime, name: str, visible: Visible | None) -> str:
    if (reason := runtime.registry.absent_reason(name)) is not None:
        return reason
    near = runtime.registry.near_names(name, visible=visible)
    hint = f" Did you mean: {', '.join(near)}?" if near else " Call tools/list to see the catalogue."
    return f"Unknown tool '{clip(name, MAX_NAME_CHARS)}'.{hint}"
