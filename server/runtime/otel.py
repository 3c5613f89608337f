"""OpenTelemetry for operators: traces and metrics over OTLP, and `/metrics` for Prometheus on HTTP.

Off unless asked: by the standard environment (`OTEL_EXPORTER_OTLP_ENDPOINT` and its per-signal forms,
`OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` naming `otlp` or `prometheus`) or by config.json `telemetry`;
`OTEL_SDK_DISABLED=true` wins. Asking for it without the `otel` extra installed stops the start with the line that
installs it. The spans and instruments themselves live where the work is (tools/framework/context/telemetry.py, the
SDK's own `tools/call` server span, which takes the caller's trace context from the request's `_meta` as SEP-414 says);
this module installs the SDK's providers and exporters (with `ClientNames` first), and flushes them when the server
stops.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from managed_tools.server import __version__
from managed_tools.server.config.data_dir import ConfigError
from managed_tools.server.config.user_config import TelemetryConfig
from managed_tools.tools.framework.context import telemetry as recording

INSTALL = "pip install 'managed-tools-mcp[otel]'"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Plan:
    """What is asked for; None for an endpoint leaves the exporter to read the OTEL_* environment."""

    traces: bool
    metrics: bool
    prometheus: bool
    endpoint: str | None

    @property
    def anything(self) -> bool:
        return self.traces or self.metrics or self.prometheus


def plan(config: TelemetryConfig, environ: Mapping[str, str] | None = None) -> Plan:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Plan(traces=False, metrics=False, prometheus=False, endpoint=None)

    def exporters(signal: str) -> set[str]:
        return {name.strip().lower() for name in env.get(f"OTEL_{signal}_EXPORTER", "").split(",") if name.strip()}

    def endpoint(signal: str) -> bool:
        return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))

    configured = config.otlp_endpoint is not None
    traces, metrics = exporters("TRACES"), exporters("METRICS")
    return Plan(
        traces="none" not in traces and ("otlp" in traces or endpoint("TRACES") or configured),
        metrics="none" not in metrics and ("otlp" in metrics or endpoint("METRICS") or configured),
        prometheus="prometheus" in metrics or config.prometheus,
        endpoint=config.otlp_endpoint,
    )


class Installed:
    """The SDK's providers, installed for this process; `prometheus_text` answers /metrics when it is on."""

    def __init__(self, wanted: Plan) -> None:
        try:
            from opentelemetry import metrics, trace
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import MetricReader
            from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
            from opentelemetry.sdk.trace import TracerProvider
        except ImportError:
            raise ConfigError(f"OpenTelemetry is asked for, but its packages are not installed: {INSTALL}.") from None
        given = {SERVICE_VERSION: __version__}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            given[SERVICE_NAME] = "managed-tools"
        resource = Resource.create(given)
        self._tracing: Any = None
        self._metering: Any = None
        self.prometheus = wanted.prometheus
        if wanted.traces:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            self._tracing = TracerProvider(resource=resource)
            self._tracing.add_span_processor(client_names())  # first: before any other processor sees the span
            self._tracing.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=_at(wanted.endpoint, "traces")))
            )
            trace.set_tracer_provider(self._tracing)
        readers: list[MetricReader] = []
        if wanted.metrics:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=_at(wanted.endpoint, "metrics"))))
        if wanted.prometheus:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader

            readers.append(PrometheusMetricReader())
        if readers:
            self._metering = MeterProvider(resource=resource, metric_readers=readers)
            metrics.set_meter_provider(self._metering)
        recording.on()

    def prometheus_text(self) -> bytes:
        from prometheus_client import REGISTRY, generate_latest

        return generate_latest(REGISTRY)

    def shutdown(self) -> None:
        """Export what is buffered, then stop the exporters' threads."""
        for provider in (self._tracing, self._metering):
            if provider is not None:
                provider.shutdown()


SDK_SCOPE = "mcp-python-sdk"  # the MCP SDK's tracer, whose server span wraps each request
NAMED = ("gen_ai.tool.name", "gen_ai.prompt.name")


def client_names() -> Any:
    """The span processor that keeps names a client made up out of the SDK's spans (`ClientNames`)."""
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.trace import SpanKind

    class ClientNames(SpanProcessor):
        """The SDK's server span names the request's `params.name` as the client sent it (`tools/call NAME`,
        `gen_ai.tool.name`, `gen_ai.prompt.name`), any length, before anything of ours has looked at it. Through
        the SDK's supported hook for this (a span processor, at the span's start, before any exporter sees it),
        it is traced `(unknown)`; tools/framework/context/telemetry.py `known` names it again once the registry knows
        it."""

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            scope = span.instrumentation_scope
            if scope is None or scope.name != SDK_SCOPE or span.kind is not SpanKind.SERVER:
                return
            attributes = span.attributes or {}
            method = attributes.get("mcp.method.name")
            if isinstance(method, str) and span.name != method:  # the method, then the client's name for a target
                span.update_name(f"{method} {recording.UNKNOWN}")
            for key in NAMED:
                if key in attributes:
                    span.set_attribute(key, recording.UNKNOWN)

    return ClientNames()


def _at(endpoint: str | None, signal: str) -> str | None:
    """The signal's URL under the configured base; None leaves the exporter to the OTEL_* environment."""
    return None if endpoint is None else f"{endpoint.rstrip('/')}/v1/{signal}"


@contextmanager
def telemetry(config: TelemetryConfig) -> Iterator[Installed | None]:
    """The SDK installed for the server's life when asked for (None otherwise), flushed at the end."""
    wanted = plan(config)
    if not wanted.anything:
        yield None
        return
    installed = Installed(wanted)
    try:
        yield installed
    finally:
        installed.shutdown()
