"""Ports: what a handler needs from the outside world, implemented in `server/` (docs/architecture.md §1).

The catalogue never sees an MCP type; the server decides how each question travels (elicitation,
input-required results, out-of-band approval, sampling) for the client at hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, SecretStr

from managed_tools.tools.framework.context.what_runs import BoundFile


class ApprovalRequest(BaseModel):
    """What a person must judge: a tool, its canonical arguments and their digest, and a message describing
    the exact action. `kind="custom_tool"` asks the person for the tool's result, shaped by `value_schema`."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["tool_confirmation", "custom_tool"] = "tool_confirmation"
    tool_name: str
    arguments: dict[str, Any]
    args_digest: str
    message: str
    value_schema: dict[str, Any] | None = None
    binds: tuple[BoundFile, ...] = ()  # the workspace files the command runs, kept with the request


class ApprovalDecision(BaseModel):
    """The answer, or why there is none yet.

    - `approved`: run now (for a custom tool, `value` is the person's result);
    - `denied`: a person said no, or the wait ended without a yes (`reason` says which);
    - `pending`: recorded as request `request_id`, to be answered out of band before the call is retried;
    - `input_required`: the server returns the question to the client, which retries with the answer;
    - `unavailable`: nobody can be asked. Every status but `approved` means the action does not happen.
    """

    model_config = ConfigDict(frozen=True)

    status: Literal["approved", "denied", "pending", "input_required", "unavailable"]
    request_id: str | None = None
    note: str | None = None
    reason: str | None = None
    value: dict[str, Any] | None = None


class Consent(Protocol):
    """Ask a human to approve an action (or supply a custom tool's result) before anything happens."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision: ...


class VariableRequest(BaseModel):
    """A required variable with no value yet: which tool needs it, its name and kind, and what it is for (shown
    to the person who supplies it)."""

    model_config = ConfigDict(frozen=True)

    tool_name: str
    name: str
    type: Literal["text", "secret"]
    description: str


class VariableAnswer(BaseModel):
    """What the person gave. `provided` carries the value (a SecretStr, so no repr or log shows it);
    `declined` means they said no; `input_required` means the server returns the question to the client, which
    retries the call with the answer (2026-07-28); `unavailable` means nobody could be asked this way, and `note`
    says exactly what to do instead (the `managed-tools secret set NAME` command)."""

    model_config = ConfigDict(frozen=True)

    status: Literal["provided", "declined", "input_required", "unavailable"]
    value: SecretStr | None = None
    note: str | None = None


class VariableInput(Protocol):
    """Ask a person for a missing variable's value: a text by form elicitation, a secret by URL-mode elicitation
    to a one-time loopback page (never through a form: the MCP spec forbids secrets there)."""

    async def ask(self, request: VariableRequest) -> VariableAnswer: ...


class NoVariableInput:
    """Where nobody can be asked (reading resources, a child run): every question is unavailable."""

    async def ask(self, request: VariableRequest) -> VariableAnswer:
        return VariableAnswer(status="unavailable")


class Progress(Protocol):
    """Report progress or a heartbeat during long work; a no-op when the client did not ask for it."""

    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> None: ...


LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


class ClientLog(Protocol):
    """Tell the client what a call is doing (log notifications); dropped when the client did not ask for them."""

    async def log(self, level: LogLevel, message: str) -> None: ...


class SamplingUnavailableError(Exception):
    """The client cannot run its model for us (no sampling capability, or no back-channel)."""


class Sampler(Protocol):
    """Ask the client's model to produce text (latent tools, seed 003)."""

    async def sample(self, prompt: str, *, max_tokens: int) -> str: ...


class ModelCall(BaseModel):
    """One tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any]


class ModelTurn(BaseModel):
    """A message of the conversation a child runs through the client's model: the model's text and tool calls
    (assistant), or the task and the results of those calls (user)."""

    role: Literal["user", "assistant"]
    text: str = ""
    calls: list[ModelCall] = []
    results: list[tuple[str, str, bool]] = []  # (call id, result text, is error)
    refused: bool = False  # the model declined to answer (its provider said so); `text` says why, where given
    tokens: int = 0  # what the provider counted for an assistant turn (config.json `models`); 0 where unknown


class ToolSpec(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]


ChildMode = Literal["sampling", "model"]


class ChildModel(Protocol):
    """A model choosing tool calls for a child session: the operator's (config.json `models`), or the client's
    through sampling with tools, offered only by handshake-era clients that declare `sampling.tools` (deprecated in
    2026-07-28, so never the only way)."""

    @property
    def mode(self) -> ChildMode:
        """Whose model: the client's (sampling) or the operator's (config.json `models`)."""
        ...

    def available(self) -> bool: ...

    async def turn(
        self, system: str, conversation: list[ModelTurn], tools: list[ToolSpec], *, max_tokens: int
    ) -> ModelTurn: ...

    def consent_in(self, session_id: str, wake_id: str) -> Consent:
        """The same person, asked about a call in another session (the child's requests are its own)."""
        ...


class ModelProvider(Protocol):
    """A model the operator configured (config.json `models`): it runs children and wakes headless and fulfils
    latent tools, whatever the client offers (server/providers/)."""

    def child_model(self, consent_in: Callable[[str, str], Consent]) -> ChildModel:
        """One run's model, with the configured limits fresh; `consent_in(session, wake)` asks about its calls."""
        ...

    def sampler(self) -> Sampler: ...


class Quiet:
    """Progress and log notifications where no client listens (a run with nobody attached): dropped."""

    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None

    async def log(self, level: LogLevel, message: str) -> None:
        return None


class NoChildModel:
    mode: ChildMode = "sampling"

    def available(self) -> bool:
        return False

    async def turn(
        self, system: str, conversation: list[ModelTurn], tools: list[ToolSpec], *, max_tokens: int
    ) -> ModelTurn:
        raise SamplingUnavailableError("The client did not offer sampling with tools on this connection.")

    def consent_in(self, session_id: str, wake_id: str) -> Consent:
        raise SamplingUnavailableError("No client model runs here.")


class ToolReveal(Protocol):
    """The search profile (`serve --tool-search`): add tools to the list this connection's client sees and tell
    it the list changed. False where the client cannot hear that (2026-07-28, stateless HTTP): it calls them
    through tools_call instead."""

    async def reveal(self, names: list[str]) -> bool: ...


class NoReveal:
    async def reveal(self, names: list[str]) -> bool:
        return False


class HeadlessRun(Protocol):
    """Run a session with no client attached, through the operator's model provider: `message` is the turn it
    starts from, every tool call it makes goes through the executor in that session, and the final answer is
    returned. Only a server with a provider configured has one (`Runtime.headless`); a due wake uses it."""

    async def __call__(self, session_id: str, owner: str, message: str) -> str: ...
