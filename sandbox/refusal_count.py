"""How often the sandbox refused something, as an OpenTelemetry counter (a no-op until server/runtime/otel.py installs a
provider; tools/framework/context/telemetry.py has the tools' own). Only the kind is counted, never what was refused."""

from __future__ import annotations

from typing import Literal

from opentelemetry import metrics

_REFUSALS = metrics.get_meter("managed-tools").create_counter(
    "managed_tools.sandbox.refusals",
    unit="{refusal}",
    description="What the sandbox refused: a connection the egress proxy blocked, a path that led out of its mount",
)


def counted(kind: Literal["network", "path"]) -> None:
    _REFUSALS.add(1, {"managed_tools.refusal": kind})
