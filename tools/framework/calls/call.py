"""One parsed call on its way through the executor's steps 3 to 8: what it is, what a person approved for it, and the
context its handler (or a check before it) runs in."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from managed_tools.stores.db import Tx
from managed_tools.tools.framework.calls.call_result import CallResult
from managed_tools.tools.framework.calls.result_shaping import mask_found, scrub_block
from managed_tools.tools.framework.calls.span import Span
from managed_tools.tools.framework.context.context import Ports, ToolContext
from managed_tools.tools.framework.context.what_runs import WhatRuns
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.registry import Visible
from managed_tools.tools.framework.wire import redaction, secret_scan
from managed_tools.tools.framework.wire.models import Arguments


@dataclass(frozen=True)
class Call:
    """One parsed call on its way through steps 3 to 8."""

    definition: ToolDefinition
    args: Arguments
    canonical: dict[str, Any]
    digest: str
    ports: Ports
    span: Span
    timeout: float
    visible: Visible | None  # which tools the caller may use (its OAuth scopes); a routed call keeps them
    budgeted: bool  # the per-call time budget set `timeout` (a stop is then the budget's refusal)
    # Credentials the secret scan found in the arguments: the call asks a person first, shown them masked.
    argument_secrets: tuple[secret_scan.Hit, ...] = ()
    # The resolved values of the tool's variables, filled before anything runs (tools/framework/calls/variables.py).
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
                content=tuple(scrub_block(block) for block in result.content),
                action_required=redaction.scrub(result.action_required),
            )
        if self.definition.scanned and self.span.runtime.secret_scanning.results:
            result = mask_found(result)
        return result


@dataclass(frozen=True)
class Approved:
    """What a person approved for this call: the run (a command's tools) and their approval request (None when
    the call needed nobody, or ran unasked inside the sandbox under --auto-sandboxed)."""

    run: WhatRuns | None = None
    request_id: str | None = None


NOBODY_ASKED = Approved()


def call_context(call: Call, tx: Tx, approved: Approved = NOBODY_ASKED) -> ToolContext:
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
