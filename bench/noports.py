"""Ports for benchmarks that call tools in-process: nobody to ask, nothing to report, no client model."""

from __future__ import annotations

from managed_tools.tools.framework.context.context import Ports
from managed_tools.tools.framework.context.ports import (
    ApprovalDecision,
    ApprovalRequest,
    LogLevel,
    SamplingUnavailableError,
)


class NoConsent:
    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(status="unavailable")


class NoProgress:
    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


class NoSampler:
    async def sample(self, prompt: str, *, max_tokens: int) -> str:
        raise SamplingUnavailableError("No client model in the benchmark.")


class NoLog:
    async def log(self, level: LogLevel, message: str) -> None:
        return None


PORTS = Ports(consent=NoConsent(), progress=NoProgress(), sampler=NoSampler(), client_log=NoLog())
