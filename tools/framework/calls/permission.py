"""Step 4, permission: whether a call needs a person and, if so, their answer (a call approved for the session, or
one the sandbox contains under --auto-sandboxed, runs unasked and audited)."""

from __future__ import annotations

from typing import Any, Literal

from managed_tools.sandbox import layers
from managed_tools.stores import approvals
from managed_tools.stores.errors import PendingCapError
from managed_tools.tools.framework.calls.arguments import approval_digest, clip, consent_message, without_hidden
from managed_tools.tools.framework.calls.call import NOBODY_ASKED, Approved, Call, call_context
from managed_tools.tools.framework.calls.call_result import Refusal
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.context.ports import ApprovalDecision, ApprovalRequest
from managed_tools.tools.framework.context.what_runs import (
    BoundFile,
    TooLongToShow,
    WhatRuns,
    changed_files,
    visible,
    visible_lines,
)
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire import secret_scan

CONSENT_PREVIEW_CHARS = 4000


async def confirm(call: Call) -> Approved:
    """Step 4: whether the call needs a person (its policy, a credential in its arguments, or its own reason such
    as untrusted content promoted into shared memory) and, if so, their approval. A call a person approved for
    the session, or (with --auto-sandboxed) one the sandbox contains, runs unasked."""
    definition = call.definition
    asks = definition.asks(call.args) or bool(call.argument_secrets)
    if not asks and definition.asks_because is None:
        return NOBODY_ASKED
    what, preview, gap, reason = None, None, None, None
    async with call.span.runtime.db.read() as tx:
        ctx = call_context(call, tx)
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
            raise Refusal("tool_error", f"{exc} Nobody was asked; {call.definition.name} did not run.") from None
        if call.definition.contained is not None:
            gap = call.definition.contained(ctx, call.args)
    in_env = env_secrets(call.span.runtime, definition, what)
    if in_env:
        async with call.span.runtime.db.write() as tx:
            await call.span.write_secrets(tx, "env", tuple(secret_scan.kinds(in_env)))
    if reason is None:
        digest = approval_digest(call.definition, call.canonical, what)
        forced = bool(call.argument_secrets or in_env)
        unasked = await _runs_unasked(call, digest, what, gap, forced=forced)
        if unasked is not None:
            return Approved(what, unasked or None)
        changed = await _changed_since_remembered(call, what)
        if changed:
            names = ", ".join(visible(path) for path in changed)
            preview = f"{preview}\n\nAsked again: this command was approved for the session, and since then " + (
                f"{names} changed."
            )
    else:  # asked every time: an earlier yes for the same arguments was given before this content's sources
        preview = f"{preview}\n\nAsked because {reason}." if preview else f"Asked because {reason}."
    decision = await ask(call, "tool_confirmation", what, preview, gap, in_env=in_env)
    return Approved(what, decision.request_id or "approved")


def argument_secrets(
    runtime: Runtime, definition: ToolDefinition, canonical: dict[str, Any]
) -> tuple[secret_scan.Hit, ...]:
    if not (definition.scanned and runtime.secret_scanning.arguments):
        return ()
    return tuple(secret_scan.find_in(secret_scan.strings(without_hidden(definition, canonical))))


def env_secrets(runtime: Runtime, definition: ToolDefinition, what: WhatRuns | None) -> tuple[secret_scan.Hit, ...]:
    """Credentials in the env a command runs with (set with shell_set_env), scanned with its arguments: a key the
    command uses from there asks as it would typed into the command."""
    if what is None or not what.env or not (definition.scanned and runtime.secret_scanning.arguments):
        return ()
    return tuple(secret_scan.find_in(f"{name}={value}" for name, value in sorted(what.env.items())))


async def _changed_since_remembered(call: Call, what: WhatRuns | None) -> list[str]:
    """The bound files that changed since a person approved this same call (tool, arguments, command, cwd and
    env) for the session: its digest recomputed with the files as they were then is the one remembered."""
    if what is None or not what.binds:
        return []
    runtime, attachment = call.span.runtime, call.span.attachment
    async with runtime.db.read() as tx:
        records = await approvals.remembered_of_tool(tx, attachment.session_id, call.definition.name)
    for record in records:
        before = tuple(BoundFile.model_validate(bound) for bound in record.binds)
        then = what.model_copy(update={"binds": before})
        if approval_digest(call.definition, call.canonical, then) == record.args_digest:
            return changed_files(before, what.binds)
    return []


async def _runs_unasked(call: Call, digest: str, what: WhatRuns | None, gap: str | None, forced: bool) -> str | None:
    """Whether this call runs without a question, and on whose word: the approval request that approved this
    exact call for the session (its bound files unchanged: they are in the digest), or "" when the tool runs inside
    the full sandbox (`gap` None) and the person chose --auto-sandboxed (never for a call `forced` to ask). Either
    way it is audited, with the files it runs as they are now; None: ask."""
    runtime, attachment, name = call.span.runtime, call.span.attachment, call.definition.name
    async with runtime.db.read() as tx:
        remembered = await approvals.remembered(tx, attachment.session_id, name, digest)
    why: approvals.Unasked
    detail: dict[str, Any]
    if remembered is not None:
        why, detail = "remembered", {"requestId": remembered.id}
    elif runtime.auto_sandboxed and call.definition.contained is not None and gap is None and not forced:
        why, detail = "auto_sandboxed", {"sandbox": layers.in_force(runtime.confinement)}
    else:
        return None
    if what is not None and what.binds:
        detail["binds"] = [bound.model_dump(mode="json", exclude_none=True) for bound in what.binds]
    async with runtime.db.write() as tx:
        await approvals.record_unasked(
            tx, attachment.session_id, attachment.wake_id, tool_name=name, args_digest=digest, why=why, detail=detail
        )
    return remembered.id if remembered is not None else ""


async def ask(
    call: Call,
    kind: Literal["tool_confirmation", "custom_tool"],
    what: WhatRuns | None = None,
    preview: str | None = None,
    gap: str | None = None,
    *,
    in_env: tuple[secret_scan.Hit, ...] = (),
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
    if in_env:  # the question shows the env's values: masked, and said
        message = secret_scan.mask(message, in_env) + (
            "\nAsked because the env set with shell_set_env holds what looks like a credential "
            f"({', '.join(secret_scan.kinds(in_env))}), masked here: the command would see it as set."
        )
    request = ApprovalRequest(
        kind=kind,
        tool_name=name,
        arguments=secret_scan.mask(call.canonical, hits),
        args_digest=digest,
        message=message,
        # The form a person fills, as the user wrote it (a titled option is `const`, SEP-1330), not the portable
        # form a model reads (docs/decisions/portable-schemas.md).
        value_schema=definition.output_model.model_json_schema(by_alias=True) if kind == "custom_tool" else None,
        binds=() if what is None else what.binds,
    )
    try:
        decision = await call.ports.consent.ask(request)
    except PendingCapError as exc:  # too many questions wait already: nothing was asked, a person's answers unblock it
        raise Refusal("quota_exceeded", str(exc), "blocked") from None
    if decision.status == "approved":
        return decision
    action = {"requestId": decision.request_id, "toolName": name, "argsDigest": digest}
    if decision.status == "denied":
        note = f": {decision.note}" if decision.note else ""
        why = f" ({decision.reason})" if decision.reason and decision.reason != "declined" else ""
        raise Refusal("permission", f"The user denied confirmation for {name}{note}{why}.", "blocked")
    if decision.status == "pending":
        raise Refusal("permission", decision.reason or f"{name} is waiting for a person.", "blocked", action)
    if decision.status == "input_required":
        raise Refusal("input_required", f"{name} is waiting for the user's answer.", "blocked", action)
    raise Refusal(
        "permission",
        f"{name} needs a person's approval and no way to ask one is available here, "
        "so it was not run (always_ask tools fail closed).",
        "blocked",
    )


def _shown_args(call: Call) -> dict[str, Any]:
    """The arguments a person reads: those given with a value other than the default (null and defaults say
    nothing), hidden ones left out. The approval still binds the canonical set, defaults included."""
    given = call.args.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude_none=True)
    return without_hidden(call.definition, given)
