"""A call's record: its `span.started` / `span.completed` events (and a secret-scan hit's audit event), written
before its result is returned, including for a call refused before its handler could run."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from managed_tools.stores import event_search, events, usage
from managed_tools.stores.db import Tx
from managed_tools.stores.errors import DatabaseUnwritableError
from managed_tools.stores.ids import utc_now, uuid7
from managed_tools.tools.framework.calls.arguments import clip
from managed_tools.tools.framework.calls.call_result import CallResult
from managed_tools.tools.framework.context.budget import BudgetTracker, estimated_tokens, unlimited
from managed_tools.tools.framework.context.context import Attachment, Runtime

log = logging.getLogger("managed_tools.executor")

SECRET_EVENT = "secret.detected"
RESULT_SUMMARY_CHARS = 300
COMMAND_CHARS = 200  # of a shell command, repeated in its completion event
MAX_BLOCKED = 20  # refused destinations kept in a completion event


@dataclass
class Span:
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
    args_shown: dict[str, Any] = field(default_factory=dict)  # the arguments as recorded: previewed, secrets masked

    def start(self, payload: dict[str, Any]) -> None:
        shown = payload.get("args")
        self.args_shown = shown if isinstance(shown, dict) else {}
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
            waits = result.action_required.get("requestId") if result.action_required else None
            if isinstance(waits, str):  # not refused: waiting for a person's answer to this request
                payload["waitsFor"] = waits
        elif self.summarize_result:
            payload["resultSummary"] = clip(result.text, RESULT_SUMMARY_CHARS)
        blocked = result.structured.get("networkBlocked") if result.structured else None
        if blocked:  # what the egress proxy refused a command: the sandbox's refusals, shown to a person
            payload["networkBlocked"] = blocked[:MAX_BLOCKED]
        if result.withheld:  # what was kept from the model, by digest: events are readable by the model
            payload["withheld"] = {name: _digest(value) for name, value in result.withheld.items()}
        outcome: str = result.status
        exit_code = result.structured.get("exitCode") if result.structured else None
        if isinstance(exit_code, int):  # a command's end: what ran and how it ended, for the person reading events
            payload["exitCode"] = exit_code
            if (command := events.command_line(self.args_shown)) is not None:  # as masked in the start event
                payload["command"] = clip(command, COMMAND_CHARS)
            outcome = f"failed (exit {exit_code})" if exit_code else f"{outcome} (exit 0)"
        summary = f"{self.tool_name}: {outcome} in {duration_ms:.0f} ms"
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

    async def write_secrets(self, tx: Tx, where: Literal["arguments", "env", "result"], kinds: tuple[str, ...]) -> None:
        """The audit record of a secret-scan hit: where and what kind, never the value."""
        payload = {"spanId": self.span_id, "toolName": self.tool_name, "where": where, "kinds": list(kinds)}
        summary = f"{self.tool_name}: possible credential in its {where} ({', '.join(kinds)}), masked"
        await events.append_event(
            tx, self.attachment.session_id, self.attachment.wake_id, SECRET_EVENT, payload, summary=summary
        )

    async def flush_started(self) -> None:
        """The call on record before it may change anything, run anything or wait for a person: one round trip."""
        await self.runtime.db.record(self.write_started)


async def write_completed(span: Span, result: CallResult) -> CallResult:
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


async def record_refusal(span: Span, result: CallResult, arguments: Any) -> CallResult:
    """A call refused before parsing succeeded: both span events in one round trip, without argument values. The
    refusal is the answer even when the record cannot be written (nothing ran)."""
    span.start({"argKeys": sorted(str(k) for k in arguments)[:32] if isinstance(arguments, dict) else []})
    await write_completed(span, result)
    return result


def _digest(value: Any) -> dict[str, Any]:
    body = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return {"sha256": hashlib.sha256(body.encode()).hexdigest(), "chars": len(body)}
