"""The executor: the one path every tool call takes (docs/architecture.md §3, seed 002 "Runtime Dispatch").

1 lookup, 2 parse (extra="forbid"), 3 deadline, 4 permission, 5 context, 6 handler inside a transaction
(rolled back on failure), 7 span events, 8 result shaping. Every outcome, including refusals before the
handler runs, is written as `span.started` / `span.completed` events before the result is returned.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import anyio

from managed_tools.sandbox import layers
from managed_tools.sandbox.paths import PathEscape
from managed_tools.stores import approvals, event_search, events, latent_calls, usage
from managed_tools.stores.db import NoTransaction, Tx
from managed_tools.stores.errors import DatabaseUnwritableError, PreconditionError, StoreError
from managed_tools.stores.ids import utc_now, uuid7
from managed_tools.tools.framework import latent, redaction, secret_scan, telemetry, variables
from managed_tools.tools.framework.arguments import (
    ArgumentError,
    approval_digest,
    clip,
    consent_message,
    parse_call,
    without_hidden,
)
from managed_tools.tools.framework.budget import (
    BudgetExceededError,
    BudgetTracker,
    estimated_tokens,
    session_over,
    unlimited,
)
from managed_tools.tools.framework.compact import compact_text
from managed_tools.tools.framework.content import Block, ResourceBlock, TextBlock
from managed_tools.tools.framework.context import Attachment, Ports, Runtime, ToolContext
from managed_tools.tools.framework.custom import OutputMismatch, check_output
from managed_tools.tools.framework.definition import ToolDefinition
from managed_tools.tools.framework.errors import Refused, ToolError
from managed_tools.tools.framework.models import Arguments, Formatted
from managed_tools.tools.framework.ports import ApprovalDecision, ApprovalRequest, SamplingUnavailableError
from managed_tools.tools.framework.registry import Visible
from managed_tools.tools.framework.what_runs import TooLongToShow, WhatRuns, visible_lines

log = logging.getLogger("managed_tools.executor")

Status = Literal["success", "error", "blocked", "cancelled"]
ErrorKind = Literal[
    "unknown_tool",
    "invalid_arguments",
    "deadline",
    "permission",
    "input_required",
    "requires_action",
    "handed_back",
    "budget",
    "tool_error",
    "refused",
    "conflict",
    "timeout",
    "busy",
    "state_gone",
    "state_unavailable",
    "disk_full",
    "state_read_only",
    "quota_exceeded",
    "sandbox_refused",
    "internal",
]
SECRET_EVENT = "secret.detected"
PREVIEW_CHARS = 200
RESULT_SUMMARY_CHARS = 300
CONSENT_PREVIEW_CHARS = 4000
MAX_NAME_CHARS = 64
MAX_BLOCKED = 20  # refused destinations kept in a completion event
UNKNOWN_TOOL = "(unknown)"


@dataclass(frozen=True)
class CallResult:
    """What the server turns into a CallToolResult: structured output on success, a message otherwise.

    `content` holds the blocks to show (a tool's `render`, or the text plus attached blocks); without them the
    model sees `text`. `touched` lists the resources the call changed."""

    status: Status
    text: str
    structured: dict[str, Any] | None = None
    content: tuple[Block, ...] = ()
    error_kind: ErrorKind | None = None
    action_required: dict[str, Any] | None = None
    touched: tuple[str, ...] = ()
    # The kinds of credential the secret scan masked in this result (never their values): audited.
    secrets_found: tuple[str, ...] = ()
    # The result fields kept from the model (ToolDefinition.context_excluded): for the person and the audit only.
    withheld: dict[str, Any] | None = None

    @property
    def is_error(self) -> bool:
        return self.status != "success"

    def visible_chars(self) -> int:
        """The characters this result puts into the conversation (session_describe_context adds them up): its
        text, or the text of the blocks shown instead; binary blocks are left out (their cost is the client's)."""
        if not self.content:
            return len(self.text)
        return sum(len(block.text or "") for block in self.content if isinstance(block, TextBlock | ResourceBlock))


class _Refusal(Exception):
    def __init__(
        self, kind: ErrorKind, message: str, status: Status = "error", action: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.action = action


@dataclass
class _Span:
    runtime: Runtime
    attachment: Attachment
    tool_name: str
    span_id: str = field(default_factory=uuid7)
    started: float = field(default_factory=time.perf_counter)
    completed: bool = False
    # A writing tool's result is new evidence (what changed, what a command printed): its completion keeps a
    # bounded summary, which the event search indexes. A reading tool's result only restates recorded state.
    summarize_result: bool = False
    arg_chars: int = 0  # the arguments as parsed, in compact JSON: part of what the call cost the model
    budget: BudgetTracker = field(default_factory=unlimited)
    started_at: str = field(default_factory=utc_now)
    # The span.started payload until it is written. A call that only reads writes both its events after it ran,
    # in one round trip; every other call writes it first (`flush_started`), before it can have any effect.
    unwritten: dict[str, Any] | None = None
    argument_secrets: tuple[str, ...] = ()  # the kinds of credential the scan found in the arguments

    def start(self, payload: dict[str, Any]) -> None:
        self.unwritten = {"spanId": self.span_id, "spanKind": "tool", "toolName": self.tool_name, **payload}

    def tokens(self, result: CallResult) -> int:
        return estimated_tokens(self.arg_chars + result.visible_chars()) + self.budget.model_tokens

    def completed_payload(self, result: CallResult) -> tuple[dict[str, Any], str]:
        duration_ms = round((time.perf_counter() - self.started) * 1000, 3)
        payload: dict[str, Any] = {
            "spanId": self.span_id,
            "spanKind": "tool",
            "toolName": self.tool_name,
            "result": result.status,
            "durationMs": duration_ms,
            "resultChars": result.visible_chars(),
            "tokens": self.tokens(result),
        }
        if result.is_error:
            payload["errorKind"] = result.error_kind
            payload["error"] = clip(result.text, 400)
        elif self.summarize_result:
            payload["resultSummary"] = clip(result.text, RESULT_SUMMARY_CHARS)
        blocked = result.structured.get("networkBlocked") if result.structured else None
        if blocked:  # what the egress proxy refused a command: the sandbox's refusals, shown to a person
            payload["networkBlocked"] = blocked[:MAX_BLOCKED]
        if result.withheld:  # what was kept from the model, by digest: events are readable by the model
            payload["withheld"] = {name: _digest(value) for name, value in result.withheld.items()}
        summary = f"{self.tool_name}: {result.status} in {duration_ms:.0f} ms"
        return payload, summary

    async def write_started(self, tx: Tx) -> None:
        """The span.started event, if not yet written; the completion touches the session (once per call)."""
        if self.unwritten is None:
            return
        body, self.unwritten = self.unwritten, None
        await events.append_event(
            tx, self.attachment.session_id, self.attachment.wake_id, "span.started", body,
            created_at=self.started_at, touch=False,
        )  # fmt: skip
        if self.argument_secrets:
            await self.write_secrets(tx, "arguments", self.argument_secrets)

    async def write_completed(self, tx: Tx, result: CallResult) -> None:
        """The completion (and the start, if it waited), then the event index's next batch if one is due."""
        await self.write_started(tx)
        payload, summary = self.completed_payload(result)
        session_id = self.attachment.session_id
        record = await events.append_event(
            tx, session_id, self.attachment.wake_id, "span.completed", payload, summary=summary
        )
        if result.error_kind != "budget":  # a refusal for the budget's sake is not counted against it
            await usage.add(tx, session_id, tokens=payload["tokens"], duration_ms=payload["durationMs"])
        if result.secrets_found:
            await self.write_secrets(tx, "result", result.secrets_found)
        await event_search.index_pending(tx, record.seq)

    async def write_secrets(self, tx: Tx, where: Literal["arguments", "result"], kinds: tuple[str, ...]) -> None:
        """The audit record of a secret-scan hit: where and what kind, never the value."""
        payload = {"spanId": self.span_id, "toolName": self.tool_name, "where": where, "kinds": list(kinds)}
        summary = f"{self.tool_name}: possible credential in its {where} ({', '.join(kinds)}), masked"
        await events.append_event(
            tx, self.attachment.session_id, self.attachment.wake_id, SECRET_EVENT, payload, summary=summary
        )

    async def flush_started(self) -> None:
        """The call on record before it may change anything, run anything or wait for a person: one round trip."""
        await self.runtime.db.record(self.write_started)


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
            span = _Span(runtime, attachment, clip(name, MAX_NAME_CHARS))
            unknown = CallResult("error", _unknown_tool_message(runtime, name, visible), error_kind="unknown_tool")
            return observed.ended(await _record_refusal(span, unknown, arguments))
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


class Routed(_Refusal):
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
    span = _Span(runtime, attachment, clip(definition.name, MAX_NAME_CHARS))
    try:
        args, canonical, digest = parse_call(definition, arguments)
    except ArgumentError as exc:
        return await _record_refusal(span, CallResult("error", str(exc), error_kind="invalid_arguments"), arguments)
    span.summarize_result = not definition.read_only and not definition.hidden_args
    span.arg_chars = len(json.dumps(canonical, separators=(",", ":"), ensure_ascii=False))
    found = _argument_secrets(runtime, definition, canonical)

    span.start(
        {
            "ownership": definition.ownership,
            "permissionPolicy": definition.permission_policy,
            "argsDigest": digest,
            "args": _preview(secret_scan.mask(without_hidden(definition, canonical), found)),
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
                span.budget = BudgetTracker(runtime.budgets, await usage.read(tx, attachment.session_id))
        call = _Call(
            definition, args, canonical, digest, ports, span, timeout, visible, budgeted, argument_secrets=found
        )
        result = await _run(call)
    except BaseException:
        # Cancelled by the client (or the process is going down): record it, shielded, then re-raise.
        if not span.completed:
            with anyio.CancelScope(shield=True):
                cancelled = CallResult("cancelled", "The call was cancelled.", error_kind="internal")
                await _write_completed(span, cancelled)
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


@dataclass(frozen=True)
class _Call:
    """One parsed call on its way through steps 3 to 8."""

    definition: ToolDefinition
    args: Arguments
    canonical: dict[str, Any]
    digest: str
    ports: Ports
    span: _Span
    timeout: float
    visible: Visible | None  # which tools the caller may use (its OAuth scopes); a routed call keeps them
    budgeted: bool  # the per-call time budget set `timeout` (a stop is then the budget's refusal)
    # Credentials the secret scan found in the arguments: the call asks a person first, shown them masked.
    argument_secrets: tuple[secret_scan.Hit, ...] = ()
    # The resolved values of the tool's variables, filled before anything runs (tools/framework/variables.py).
    values: dict[str, str] = field(default_factory=dict)

    def redact(self, result: CallResult) -> CallResult:
        """Every secret resolved in this process (the call's own variables, an upstream's env and headers) removed
        from everything the call shows or records, whatever the handler or the upstream did with them; then, for
        a scanned tool, every credential the secret scan finds in it."""
        if redaction.KNOWN.ordered:
            result = replace(
                result,
                text=redaction.scrub(result.text),
                structured=redaction.scrub(result.structured),
                content=tuple(_scrub_block(block) for block in result.content),
                action_required=redaction.scrub(result.action_required),
            )
        if self.definition.scanned and self.span.runtime.secret_scanning.results:
            result = _mask_found(result)
        return result


async def _run(call: _Call) -> CallResult:
    definition, span, runtime = call.definition, call.span, call.span.runtime
    try:
        _may_start(call)
        await _gather(call)
        if definition.handler is None:
            if definition.ownership == "latent":
                with anyio.fail_after(call.timeout):
                    result = _success(await _fulfil_latent(call))
            elif definition.ownership == "custom":
                # A person is the implementation of a custom tool: their answer, once valid, is the result.
                result = _success(_custom_output(call, (await _ask(call, "custom_tool")).value))
            else:
                raise _Refusal(
                    "tool_error", f"{definition.name} has no implementation on this server and cannot be run here."
                )
            result = _withhold(definition, call.redact(result))  # an answer may quote a secret it was given
            return await _write_completed(span, result)
        await _check_precondition(call)
        approved = await _confirm(call)
        # One scope for both the shield and the timeout (fail_after would be a second): a shielded scope still ends
        # at its own deadline, and it catches only that (a client's cancel from outside goes on through it).
        shield = definition.interrupt_behavior == "block"
        with anyio.CancelScope(shield=shield, deadline=anyio.current_time() + call.timeout) as scope:
            if definition.own_transactions:
                result = await _call_handler(call, NoTransaction(), approved)
                result = await _write_completed(span, result)
            elif definition.read_only:
                async with runtime.db.read() as tx:
                    result = await _call_handler(call, tx, approved)
                result = await _write_completed(span, result)
            else:
                async with runtime.db.write() as tx:
                    result = await _call_handler(call, tx, approved)
                    # Committed with the handler's writes: the effect and its audit record land together.
                    await span.write_completed(tx, result)
                span.completed = True
        if scope.cancelled_caught:
            raise TimeoutError
        return result
    except _Refusal as refusal:
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
    return await _write_completed(span, call.redact(result))


def _may_start(call: _Call) -> None:
    """Step 3: a call past its deadline, or of a session that has used its budget (config.json
    budgets.perSession), is refused before anything runs."""
    if call.timeout <= 0:
        raise _Refusal("deadline", f"The deadline for {call.definition.name} had already passed; it was not run.")
    over = session_over(call.span.runtime.budgets.per_session, call.span.budget.used_before)
    if over is not None:
        raise _Refusal(
            "budget",
            f"This session has used its budget ({over}), so {call.definition.name} was not run. A person can raise "
            "config.json budgets.perSession; a new session starts with a fresh budget.",
            "blocked",
        )


def _over_budget(call: _Call, exc: BudgetExceededError) -> _Refusal:
    return _Refusal(
        "budget",
        f"{call.definition.name} was refused: {exc}; {_undone(call.definition)}. Ask for less (a limit, a section "
        "or field filter), or a person can raise config.json budgets.perCall.tokens.",
        "blocked",
    )


def _stopped(call: _Call) -> CallResult:
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


async def _check_precondition(call: _Call) -> None:
    """A tool's own check before anything runs or anyone is asked; its refusal is by design, not failed work."""
    if call.definition.precondition is None:
        return
    async with call.span.runtime.db.read() as tx:
        try:
            await call.definition.precondition(_context(call, tx), call.args)
        except ToolError as exc:
            raise _Refusal("refused", str(exc)) from None


async def _gather(call: _Call) -> None:
    """The tool's variables, before anything runs; a required one nobody gives stops the call here."""
    if not call.definition.variables:
        return
    try:
        runtime, attachment = call.span.runtime, call.span.attachment
        call.values.update(await variables.gather(runtime, attachment, call.ports.variables, call.definition))
        redaction.KNOWN.add(variables.secret_values(call.definition, call.values))
    except variables.Missing as missing:
        raise _Refusal(missing.kind, str(missing), "blocked", missing.action) from None


def _undone(definition: ToolDefinition) -> str:
    """What a stopped call leaves: one transaction is undone whole, a tool with its own commits as it went."""
    return "what it had already recorded stays" if definition.own_transactions else "nothing it started was kept"


@dataclass(frozen=True)
class _Approved:
    """What a person approved for this call: the run (a command's tools) and their approval request (None when
    the call needed nobody, or ran unasked inside the sandbox under --auto-sandboxed)."""

    run: WhatRuns | None = None
    request_id: str | None = None


NOBODY_ASKED = _Approved()


def _context(call: _Call, tx: Tx, approved: _Approved = NOBODY_ASKED) -> ToolContext:
    return ToolContext(
        runtime=call.span.runtime,
        attachment=call.span.attachment,
        ports=call.ports,
        tx=tx,
        deadline=anyio.current_time() + call.timeout,
        log=logging.getLogger(f"managed_tools.tools.{call.definition.name}"),
        approved_run=approved.run,
        approval=approved.request_id,
        variables=dict(call.values),
        may_use=call.visible,
        budget=call.span.budget,
    )


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


async def _call_handler(call: _Call, tx: Tx, approved: _Approved) -> CallResult:
    definition = call.definition
    assert definition.handler is not None
    ctx = _context(call, tx, approved)
    try:
        output = await definition.handler(ctx, call.args)
    except BudgetExceededError as exc:  # a model it ran spent more than the call may (ctx.budget.charge)
        raise _over_budget(call, exc) from None
    if not isinstance(output, definition.output_model):
        raise TypeError(f"{definition.name} returned {type(output).__name__}, not {definition.output_model.__name__}")
    content = tuple(definition.render(output)) if definition.render is not None else ()
    result = _withhold(definition, call.redact(_success(output.model_dump(mode="json", by_alias=True), content, ctx)))
    chosen = call.args.format if isinstance(call.args, Formatted) else None
    if (chosen or ctx.runtime.result_format) == "compact":
        result = _compacted(result)
    try:  # inside the transaction: a result over the budget undoes the call (what is withheld never reaches it)
        call.span.budget.check_call(call.span.arg_chars + result.visible_chars())
    except BudgetExceededError as exc:
        raise _over_budget(call, exc) from None
    return result


def _withhold(definition: ToolDefinition, result: CallResult) -> CallResult:
    """The result without the fields the model must not see: its text is the JSON of the rest (a rendering could
    show them, so it goes), the attached blocks stay; the fields go to `withheld`."""
    if not definition.context_excluded or result.structured is None:
        return result
    visible = {k: v for k, v in result.structured.items() if k not in definition.context_excluded}
    withheld = {k: v for k, v in result.structured.items() if k in definition.context_excluded}
    text = json.dumps(visible, separators=(",", ":"), ensure_ascii=False)
    kept = tuple(block for block in result.content if not isinstance(block, TextBlock))
    content = (TextBlock(text=text), *kept) if kept else ()
    return replace(result, text=text, structured=visible, content=content, withheld=withheld)


def _digest(value: Any) -> dict[str, Any]:
    body = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return {"sha256": hashlib.sha256(body.encode()).hexdigest(), "chars": len(body)}


def _compacted(result: CallResult) -> CallResult:
    """The compact text (tools/framework/compact.py) in place of the JSON text, for a result the tool did not render
    itself. Built from the structured output once redacted and masked, so every secret already left it: the compact
    form escapes `|` and line breaks, which a scrub of the raw values would no longer find."""
    text = compact_text(result.structured) if result.structured is not None and not result.content else None
    return result if text is None else replace(result, content=(TextBlock(text=text),))


def _success(structured: dict[str, Any], content: tuple[Block, ...] = (), ctx: ToolContext | None = None) -> CallResult:
    """`content` replaces the JSON text when a tool renders its output; what a handler attached (an image it
    read, a file it stored) follows the text."""
    text = json.dumps(structured, separators=(",", ":"), ensure_ascii=False)
    if ctx is None:
        return CallResult("success", text, structured, content=content)
    if ctx.attachments:
        content = (*(content or (TextBlock(text=text),)), *(b for shown in ctx.attachments for b in shown.blocks()))
    return CallResult("success", text, structured, content=content, touched=tuple(sorted(ctx.touched)))


async def _fulfil_latent(call: _Call) -> dict[str, Any]:
    """A model is the implementation: the client's, sampled, with one retry that shows it the schema error; or,
    where the client cannot be sampled, the calling model, to which the task is handed back."""
    definition, sampler = call.definition, call.ports.sampler
    prompt = latent.sampling_prompt(definition, call.canonical, call.values)
    try:
        answer = await sampler.sample(prompt, max_tokens=latent.SAMPLING_MAX_TOKENS)
    except SamplingUnavailableError:
        raise await _hand_back(call) from None
    try:
        return latent.check_text(definition, answer)
    except OutputMismatch as first:
        retry = latent.sampling_prompt(definition, call.canonical, call.values, refused=str(first))
        answer = await sampler.sample(retry, max_tokens=latent.SAMPLING_MAX_TOKENS)
    try:
        return latent.check_text(definition, answer)
    except OutputMismatch as second:
        raise _Refusal(
            "tool_error",
            f"The model's answer for {definition.name} does not match its output schema, even after a retry "
            f"that showed it the error: {second}.",
        ) from None


async def _hand_back(call: _Call) -> _Refusal:
    """Record the call as waiting for the calling model's answer, bound to this session, and say how to give it."""
    span = call.span
    async with span.runtime.db.write() as tx:
        call_id = await latent_calls.open_call(
            tx, span.attachment.session_id, call.definition.name, span.span_id, call.canonical
        )
    action = {"callId": call_id, "toolName": call.definition.name, "submitWith": latent.SUBMIT_TOOL}
    return _Refusal("handed_back", latent.handback_message(call.definition, call_id, call.values), "blocked", action)


async def _confirm(call: _Call) -> _Approved:
    """Step 4: whether the call needs a person (its policy, a credential in its arguments, or its own reason such
    as untrusted content promoted into shared memory) and, if so, their approval. A call a person approved for
    the session, or (with --auto-sandboxed) one the sandbox contains, runs unasked."""
    definition = call.definition
    asks = definition.asks(call.args) or bool(call.argument_secrets)
    if not asks and definition.asks_because is None:
        return NOBODY_ASKED
    what, preview, gap, reason = None, None, None, None
    async with call.span.runtime.db.read() as tx:
        ctx = _context(call, tx)
        if definition.asks_because is not None:
            reason = await definition.asks_because(ctx, call.args)
        if not asks and reason is None:
            return NOBODY_ASKED
        try:
            if call.definition.run_context is not None:
                what = await call.definition.run_context(ctx, call.args)
                preview = what.render()
            elif call.definition.consent_preview is not None:
                # A preview quotes model text (notes, a diff): made visible like the command.
                preview = visible_lines(
                    clip(await call.definition.consent_preview(ctx, call.args), CONSENT_PREVIEW_CHARS)
                )
        except TooLongToShow as exc:
            raise _Refusal("tool_error", f"{exc} Nobody was asked; {call.definition.name} did not run.") from None
        if call.definition.contained is not None:
            gap = call.definition.contained(ctx, call.args)
    if reason is None:
        digest = approval_digest(call.definition, call.canonical, what)
        unasked = await _runs_unasked(call, digest, gap, forced=bool(call.argument_secrets))
        if unasked is not None:
            return _Approved(what, unasked or None)
    else:  # asked every time: an earlier yes for the same arguments was given before this content's sources
        preview = f"{preview}\n\nAsked because {reason}." if preview else f"Asked because {reason}."
    decision = await _ask(call, "tool_confirmation", what, preview, gap)
    return _Approved(what, decision.request_id or "approved")


async def _runs_unasked(call: _Call, digest: str, gap: str | None, forced: bool) -> str | None:
    """Whether this call runs without a question, and on whose word: the approval request that approved this
    exact call for the session, or "" when the tool runs inside the full sandbox (`gap` None) and the person chose
    --auto-sandboxed (never for a call `forced` to ask). Either way it is audited; None: ask."""
    runtime, attachment, name = call.span.runtime, call.span.attachment, call.definition.name
    async with runtime.db.read() as tx:
        remembered = await approvals.remembered(tx, attachment.session_id, name, digest)
    why: approvals.Unasked
    if remembered is not None:
        why, detail = "remembered", {"requestId": remembered.id}
    elif runtime.auto_sandboxed and call.definition.contained is not None and gap is None and not forced:
        why, detail = "auto_sandboxed", {"sandbox": layers.in_force(runtime.confinement)}
    else:
        return None
    async with runtime.db.write() as tx:
        await approvals.record_unasked(
            tx, attachment.session_id, attachment.wake_id, tool_name=name, args_digest=digest, why=why, detail=detail
        )
    return remembered.id if remembered is not None else ""


async def _ask(
    call: _Call,
    kind: Literal["tool_confirmation", "custom_tool"],
    what: WhatRuns | None = None,
    preview: str | None = None,
    gap: str | None = None,
) -> ApprovalDecision:
    """Nothing happens until a person has said yes to exactly this (or answered, for a custom tool). Every
    answer but `approved` becomes a refusal; the approval returns (with a custom call's value)."""
    definition = call.definition
    name = definition.name
    digest = approval_digest(definition, call.canonical, what)
    hits = call.argument_secrets
    message = consent_message(definition, secret_scan.mask(_shown_args(call), hits), kind, preview, gap)
    if hits:  # the person sees what runs, the credential masked; the approval binds the real arguments
        message = secret_scan.mask(message, hits) + (
            f"\nAsked because its arguments hold what looks like a credential ({', '.join(secret_scan.kinds(hits))}),"
            " masked here: it would go to the tool as given."
        )
    request = ApprovalRequest(
        kind=kind,
        tool_name=name,
        arguments=secret_scan.mask(call.canonical, hits),
        args_digest=digest,
        message=message,
        value_schema=definition.output_schema() if kind == "custom_tool" else None,
    )
    decision = await call.ports.consent.ask(request)
    if decision.status == "approved":
        return decision
    action = {"requestId": decision.request_id, "toolName": name, "argsDigest": digest}
    if decision.status == "denied":
        note = f": {decision.note}" if decision.note else ""
        why = f" ({decision.reason})" if decision.reason and decision.reason != "declined" else ""
        raise _Refusal("permission", f"The user denied confirmation for {name}{note}{why}.", "blocked")
    if decision.status == "pending":
        raise _Refusal("permission", decision.reason or f"{name} is waiting for a person.", "blocked", action)
    if decision.status == "input_required":
        raise _Refusal("input_required", f"{name} is waiting for the user's answer.", "blocked", action)
    raise _Refusal(
        "permission",
        f"{name} needs a person's approval and no way to ask one is available here, "
        "so it was not run (always_ask tools fail closed).",
        "blocked",
    )


def _shown_args(call: _Call) -> dict[str, Any]:
    """The arguments a person reads: those given with a value other than the default (null and defaults say
    nothing), hidden ones left out. The approval still binds the canonical set, defaults included."""
    given = call.args.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude_none=True)
    return without_hidden(call.definition, given)


def _custom_output(call: _Call, value: dict[str, Any] | None) -> dict[str, Any]:
    try:
        return check_output(call.definition, value or {})
    except OutputMismatch as exc:
        raise _Refusal(
            "tool_error", f"The answer given for {call.definition.name} does not match its output schema: {exc}."
        ) from None


async def _write_completed(span: _Span, result: CallResult) -> CallResult:
    """The call's completion on record (with its start, if that waited: one round trip either way), then its
    result. A call of which nothing could be recorded answers with why instead: it changed nothing."""
    unrecorded = span.unwritten is not None
    try:
        await span.runtime.db.record(lambda tx: span.write_completed(tx, result))
        span.completed = True
    except DatabaseUnwritableError as exc:
        log.error("could not record the completion of %s: %s", span.tool_name, exc)
        if unrecorded:
            return CallResult("error", str(exc), error_kind=exc.kind)
    return result


async def _record_refusal(span: _Span, result: CallResult, arguments: Any) -> CallResult:
    """A call refused before parsing succeeded: both span events in one round trip, without argument values. The
    refusal is the answer even when the record cannot be written (nothing ran)."""
    span.start({"argKeys": sorted(str(k) for k in arguments)[:32] if isinstance(arguments, dict) else []})
    await _write_completed(span, result)
    return result


def _unknown_tool_message(runtime: Runtime, name: str, visible: Visible | None) -> str:
    if (reason := runtime.registry.absent_reason(name)) is not None:
        return reason
    near = runtime.registry.near_names(name, visible=visible)
    hint = f" Did you mean: {', '.join(near)}?" if near else " Call tools/list to see the catalogue."
    return f"Unknown tool '{clip(name, MAX_NAME_CHARS)}'.{hint}"


def _scrub_block(block: Block, hidden: list[str] | None = None) -> Block:
    if isinstance(block, TextBlock | ResourceBlock) and block.text is not None:
        return block.model_copy(update={"text": redaction.scrub(block.text, hidden)})
    return block


def _argument_secrets(
    runtime: Runtime, definition: ToolDefinition, canonical: dict[str, Any]
) -> tuple[secret_scan.Hit, ...]:
    if not (definition.scanned and runtime.secret_scanning.arguments):
        return ()
    return tuple(secret_scan.find_in(secret_scan.strings(without_hidden(definition, canonical))))


def _mask_found(result: CallResult) -> CallResult:
    """The result with every credential the scan finds masked: in the structured output and the blocks shown, and
    in the text (which is their JSON, where a line break inside a value is written `\\n`)."""
    texts = [
        *secret_scan.strings(result.structured),
        *(b.text or "" for b in result.content if isinstance(b, TextBlock | ResourceBlock)),
    ]
    hits = secret_scan.find_in(texts if result.structured is not None or result.content else [result.text])
    if not hits:
        return result
    values = [hit.value for hit in hits]
    in_json = [json.dumps(value, ensure_ascii=False)[1:-1] for value in values]
    return replace(
        result,
        text=redaction.scrub(result.text, [*values, *in_json]),
        structured=redaction.scrub(result.structured, values),
        content=tuple(_scrub_block(block, values) for block in result.content),
        secrets_found=tuple(secret_scan.kinds(hits)),
    )


def _preview(value: Any) -> Any:
    """Arguments as recorded in events: every string cut to PREVIEW_CHARS so the log stays bounded."""
    if isinstance(value, str):
        return clip(value, PREVIEW_CHARS)
    if isinstance(value, list):
        return [_preview(item) for item in value[:20]]
    if isinstance(value, dict):
        return {key: _preview(item) for key, item in list(value.items())[:40]}
    return value
