"""Ports: what a handler needs from the outside world, implemented in `server/` (ARCHITECTURE §1).

The catalogue never sees an MCP type; the server decides how each question travels (elicitation,
input-required results, out-of-band approval, sampling) for the client at hand.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict


class ApprovalRequest(BaseModel):
    """The exact action a person must judge: a tool, its canonical arguments and their digest."""

    model_config = ConfigDict(frozen=True)

    tool_name: str
    arguments: dict[str, Any]
    args_digest: str
    message: str


class ApprovalDecision(BaseModel):
    """`unavailable` means nobody could be asked; the executor treats it as a refusal (fail closed)."""

    model_config = ConfigDict(frozen=True)

    status: Literal["approved", "denied", "unavailable"]
    note: str | None = None
    request_id: str | None = None


class Consent(Protocol):
    """Ask a human to approve an action before its side effect happens."""

    async def approve(self, request: ApprovalRequest) -> ApprovalDecision: ...


class Progress(Protocol):
    """Report progress or a heartbeat during long work; a no-op when the client did not ask for it."""

    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> None: ...


class SamplingUnavailableError(Exception):
    """The client cannot run its model for us (no sampling capability, or no back-channel)."""


class Sampler(Protocol):
    """Ask the client's model to produce text (latent tools, seed 003)."""

    async def sample(self, prompt: str, *, max_tokens: int) -> str: ...
