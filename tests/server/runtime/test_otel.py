"""OpenTelemetry (server/runtime/otel.py, tools/framework/context/telemetry.py) against a real OTLP/HTTP receiver on
loopback: the server run as `managed-tools serve` (stdio, and HTTP for /metrics), a real client that sends its own trace
context in `_meta`, spans and metrics decoded from the protobuf the exporters send. Never an argument's value."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import Connect, data
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import trace
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import ValidationError
from test_permissions import answer
from test_upstream import PROBE

from managed_tools.server.config.data_dir import default_data_dir
from managed_tools.server.config.user_config import TelemetryConfig
from managed_tools.server.runtime.otel import client_names, plan
from managed_tools.tools.framework.context import telemetry as recording
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

SECRET_ARGUMENT = "argument-value-never-exported-3141"
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, Any]


@dataclass
class Received:
    spans: list[Span] = field(default_factory=list)
    metrics: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # name -> data points' attributes
    raw: list[bytes] = field(default_factory=list)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class _Receiver(BaseHTTPRequestHandler):
    received: Received

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.received.raw.append(body)
        if self.path == "/v1/traces":
            traces = ExportTraceServiceRequest.FromString(body)
            for resource in traces.resource_spans:
                for scope in resource.scope_spans:
                    for s in scope.spans:
                        attrs = {a.key: _value(a.value) for a in s.attributes}
                        self.received.spans.append(
                            Span(s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), attrs)
                        )
        elif self.path == "/v1/metrics":
            for resource in ExportMetricsServiceRequest.FromString(body).resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        points = getattr(metric, kind).data_points
                        self.received.metrics.setdefault(metric.name, []).extend(
                            {a.key: _value(a.value) for a in p.attributes} for p in points
                        )
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP receiver on a free loopback port, decoding what it is sent."""
    received = Received()
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Receiver,), {"received": received}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def otel_env(endpoint: str, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
        **more,
    }


@asynccontextmanager
async def stdio_server(workspace: Path, env: dict[str, str]) -> AsyncIterator[Client]:
    argv = ["-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
    params = StdioServerParameters(command=sys.executable, args=argv, env=env)
    approves: Any = answer("accept", {"approve": True})  # typed for the in-process clients' keyword arguments
    async with Client(params, mode="legacy", elicitation_callback=approves) as client:
        yield client


def with_upstream(workspace: Path) -> None:
    data_dir = default_data_dir(workspace)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "config.json").write_text(json.dumps({"mcpServers": {"probe": PROBE}}), encoding="utf-8")


async def test_tool_calls_are_traced_under_the_callers_trace_with_metrics(
    workspace: Path, collector: tuple[str, Received]
) -> None:
    endpoint, received = collector
    with_upstream(workspace)
    traceparent = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"
    async with stdio_server(workspace, otel_env(endpoint)) as client:
        with anyio.fail_after(30):
            while "probe__echo" not in {t.name for t in (await client.list_tools()).tools}:  # noqa: ASYNC110 (starting)
                await anyio.sleep(0.2)
        meta: Any = {"traceparent": traceparent}
        assert data(await client.call_tool("environment_describe", {}, meta=meta))
        echoed = await client.call_tool("probe__echo", {"text": SECRET_ARGUMENT}, meta=meta)
        assert not echoed.is_error
        assert (await client.call_tool("no_such_tool", {"x": SECRET_ARGUMENT})).is_error
        assert data(await client.call_tool("shell_run", {"command": "true"}))["exitCode"] == 0  # asked, approved
        assert (await client.call_tool("read", {"path": "../outside.txt"})).is_error  # the sandbox refuses
    # The server has stopped: its exporters flushed at shutdown.
    spans = {s.name: s for s in received.spans}
    server_span, ours = spans["tools/call environment_describe"], spans["execute_tool environment_describe"]
    assert (server_span.trace_id, server_span.parent) == (PARENT_TRACE, PARENT_SPAN)  # the caller's trace (SEP-414)
    assert (ours.trace_id, ours.parent) == (PARENT_TRACE, server_span.span_id)
    assert ours.attributes["managed_tools.tool.ownership"] == "managed"
    assert ours.attributes["managed_tools.tool.result"] == "success"
    upstream = spans["upstream probe"]
    assert upstream.parent == spans["execute_tool probe__echo"].span_id and upstream.trace_id == PARENT_TRACE
    assert upstream.attributes["gen_ai.tool.name"] == "echo"
    unknown = spans["execute_tool (unknown)"]  # a made-up name is not a span name, nor a metric series
    assert unknown.attributes["error.type"] == "unknown_tool"
    assert "wake" in spans and spans["wake"].attributes["network.transport"] == "stdio"
    assert spans["approval_wait shell_run"].parent == spans["execute_tool shell_run"].span_id
    assert {"managed_tools.refusal": "path"} in received.metrics["managed_tools.sandbox.refusals"]
    assert "managed_tools.approvals.waiting" in received.metrics
    calls = received.metrics["managed_tools.tool.calls"]
    assert {"gen_ai.tool.name": "environment_describe", "managed_tools.tool.result": "success"} in calls
    assert {"gen_ai.tool.name": "(unknown)", "error.type": "unknown_tool"} in received.metrics[
        "managed_tools.tool.errors"
    ]
    assert "managed_tools.tool.duration" in received.metrics
    assert all(SECRET_ARGUMENT.encode() not in body for body in received.raw)


async def test_prometheus_metrics_on_http_behind_the_token(workspace: Path, tmp_path: Path) -> None:
    token = "metrics-token-0123456789abcdef"
    env = {**os.environ, "OTEL_METRICS_EXPORTER": "prometheus", "MANAGED_TOOLS_TOKEN": token}
    argv = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
    process = await anyio.open_process([*argv, "--transport", "http", "--port", "0"], env=env)
    try:
        assert process.stderr is not None
        first = b""
        with anyio.fail_after(60):
            while b"\n" not in first:
                first += await process.stderr.receive()
        found = re.search(rb"http://([0-9.]+:[0-9]+)/mcp", first)
        assert found is not None, first
        url = found[1].decode()
        async with httpx2.AsyncClient(base_url=f"http://{url}") as http:
            assert (await http.get("/metrics")).status_code == 401
            auth = {"authorization": f"Bearer {token}"}
            async with (
                httpx2.AsyncClient(headers=auth) as authed,
                Client(streamable_http_client(f"http://{url}/mcp", http_client=authed)) as client,
            ):
                assert data(await client.call_tool("environment_describe", {}))
            scraped = await http.get("/metrics", headers=auth)
        assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
        assert 'managed_tools_tool_calls_total{gen_ai_tool_name="environment_describe"' in scraped.text
    finally:
        process.terminate()
        await process.wait()


def test_off_unless_asked_and_sdk_disabled_wins() -> None:
    off = plan(TelemetryConfig(), {})
    assert not off.anything
    assert plan(TelemetryConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}).traces
    assert plan(TelemetryConfig(), {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none"}).traces
    assert not plan(TelemetryConfig(), {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}).anything
    configured = TelemetryConfig(otlp_endpoint="http://collector:4318", prometheus=True)
    assert plan(configured, {}).metrics and plan(configured, {}).prometheus
    assert not plan(configured, {"OTEL_SDK_DISABLED": "true"}).anything
    with pytest.raises(ValidationError, match="pattern"):
        TelemetryConfig.model_validate({"otlpEndpoint": "file:///etc/passwd"})


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The spans this process exports, through the processors server/runtime/otel.py installs (ours first). A tracer
    provider is set once per process: the first test sets it up, later ones add their own exporter."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(client_names())
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(recording._SWITCH, "recording", True)
    yield exporter
    exporter.shutdown()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_made_up_tool_name_reaches_no_span_the_sdks_included(
    runtime: Runtime, connect: Connect, exported: InMemorySpanExporter, mode: str
) -> None:
    """Issue 34, L5: a made-up tool name of 20,000 characters landed whole in the SDK's own `tools/call` span name
    and attributes. It is traced `(unknown)`; a served tool and prompt keep their names."""
    made_up = "x" * 20_000
    async with connect(runtime, mode) as client:
        refused = await client.call_tool(made_up, {})
        assert data(await client.call_tool("environment_describe", {}))
        with pytest.raises(MCPError):
            await client.get_prompt("y" * 20_000)
    assert refused.is_error
    # The server's spans: the in-process client's own (`MCP send ...`, kind CLIENT) are the caller's, not ours.
    spans = [s for s in exported.get_finished_spans() if s.kind is not SpanKind.CLIENT]
    shown = json.dumps([[s.name, dict(s.attributes or {})] for s in spans])
    assert "x" * 64 not in shown and "y" * 64 not in shown
    names = {s.name: dict(s.attributes or {}) for s in spans}
    assert names["tools/call (unknown)"]["gen_ai.tool.name"] == "(unknown)"
    assert names["tools/call environment_describe"]["gen_ai.tool.name"] == "environment_describe"
    assert names["prompts/get (unknown)"]["gen_ai.prompt.name"] == "(unknown)"
    assert "execute_tool (unknown)" in names and "execute_tool environment_describe" in names
