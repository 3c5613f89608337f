"""Traces and metrics of what the tools do, through the OpenTelemetry API (which the MCP SDK already loads).

Until server/runtime/otel.py installs an SDK provider (only when OTEL_* or config.json `telemetry` asks) and calls
`on()`, nothing here records anything, and a tool call pays about a microsecond for it (the API's no-op span and
instruments cost 15 us). Nothing recorded carries an argument's or a result's value: a tool's name, ownership,
result and error kind, durations, counts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, StatusCode

NAME = "managed-tools"
UNKNOWN = "(unknown)"  # how a name a client made up is traced: never itself, at any length
TRACER = trace.get_tracer(NAME)
_METER = metrics.get_meter(NAME)
CALLS = _METER.create_counter("managed_tools.tool.calls", unit="{call}", description="Tool calls, by tool and result")
ERRORS = _METER.create_counter(
    "managed_tools.tool.errors", unit="{call}", description="Tool calls that did not succeed, by tool and error kind"
)
DURATION = _METER.create_histogram(
    "managed_tools.tool.duration", unit="s", description="How long tool calls took, by tool and result"
)
APPROVALS_WAITING = _METER.create_up_down_counter(
    "managed_tools.approvals.waiting", unit="{request}", description="Permission requests waiting for a person now"
)


class Ended(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def error_kind(self) -> str | None: ...


R = TypeVar("R", bound=Ended)


@dataclass
class Observed:
    """What a tool call ended in, told before the span ends (a call cut off by cancellation stays `cancelled`)."""

    status: str = "cancelled"
    error_kind: str | None = None

    def ended(self, result: R) -> R:
        self.status, self.error_kind = result.status, result.error_kind
        return result


@dataclass
class _Switch:
    recording: bool = False


_SWITCH = _Switch()


def on() -> None:
    """Record from now on (server/runtime/otel.py, once the SDK's providers are installed)."""
    _SWITCH.recording = True


@contextmanager
def tool_call(name: str, ownership: str | None = None) -> Iterator[Observed]:
    """A span around one tool call (a child of the SDK's `tools/call` span when the call came from a client), and
    its count, errors and duration."""
    observed = Observed()
    if not _SWITCH.recording:
        yield observed
        return
    started = time.perf_counter()
    if name != UNKNOWN:
        known("gen_ai.tool.name", name)
    with TRACER.start_as_current_span(f"execute_tool {name}", kind=SpanKind.INTERNAL) as span:
        try:
            yield observed
        finally:
            attributes = {"gen_ai.tool.name": name, "managed_tools.tool.result": observed.status}
            if ownership is not None:
                span.set_attribute("managed_tools.tool.ownership", ownership)
            span.set_attributes(attributes)
            CALLS.add(1, attributes)
            DURATION.record(time.perf_counter() - started, attributes)
            if observed.status != "success":
                kind = observed.error_kind or observed.status
                span.set_attribute("error.type", kind)
                span.set_status(StatusCode.ERROR)
                ERRORS.add(1, {"gen_ai.tool.name": name, "error.type": kind})


def known(attribute: str, name: str) -> None:
    """Name the request's own server span again once `name` is known to be ours (a served tool, a prompt): the SDK
    span that wraps a request names what the client sent, and server/runtime/otel.py's processor traced it
    `(unknown)`."""
    if not _SWITCH.recording:
        return
    span = trace.get_current_span()
    attributes = getattr(span, "attributes", None) or {}
    method = attributes.get("mcp.method.name")
    if attributes.get(attribute) == UNKNOWN and isinstance(method, str):
        span.set_attribute(attribute, name)
        span.update_name(f"{method} {name}")


@contextmanager
def approval_wait(tool: str) -> Iterator[None]:
    """A span while a call waits on a person, and the number waiting."""
    if not _SWITCH.recording:
        yield
        return
    APPROVALS_WAITING.add(1)
    try:
        with TRACER.start_as_current_span(f"approval_wait {tool}", attributes={"gen_ai.tool.name": tool}):
            yield
    finally:
        APPROVALS_WAITING.add(-1)


@contextmanager
def upstream_call(server: str, tool: str) -> Iterator[None]:
    """A span around a call to an upstream server's tool (the SDK's client span, which carries the trace context on
    to the upstream in `_meta`, is its child)."""
    if not _SWITCH.recording:
        yield
        return
    attributes = {"managed_tools.upstream": server, "gen_ai.tool.name": tool}
    with TRACER.start_as_current_span(f"upstream {server}", kind=SpanKind.CLIENT, attributes=attributes):
        yield


def wake(session_id: str, transport: str, started_ns: int, *, ended_ns: int | None = None) -> None:
    """A span for one wake (a client attached to a session), recorded when it ends."""
    if not _SWITCH.recording:
        return
    span = TRACER.start_span(
        "wake",
        start_time=started_ns,
        attributes={"managed_tools.session.id": session_id, "network.transport": transport},
    )
    span.end(end_time=ended_ns)
