"""The server's implementations of the catalogue's ports, over one MCP request."""

from __future__ import annotations

from typing import Any, Protocol, get_args

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.connection import allowed_log_levels
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from managed_tools.server import SERVER_NAME
from managed_tools.server.connection.state import connection_of
from managed_tools.tools.framework.context.context import Ports
from managed_tools.tools.framework.context.ports import (
    ApprovalDecision,
    ApprovalRequest,
    ChildMode,
    ChildModel,
    Consent,
    LogLevel,
    ModelCall,
    ModelProvider,
    ModelTurn,
    NoChildModel,
    NoVariableInput,
    Sampler,
    SamplingUnavailableError,
    ToolSpec,
    VariableInput,
)

LOG_LEVELS: tuple[LogLevel, ...] = get_args(LogLevel)  # least severe first
LOG_LEVEL_STATE = "managed-tools/logLevel"


class NoConsent:
    """For work that never asks a person (reading resources): any question is refused."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(status="unavailable")

    def in_session(self, session_id: str, wake_id: str) -> NoConsent:
        return self


class SessionConsent(Consent, Protocol):
    """A consent that can ask the same person about a call in another session (a child's)."""

    def in_session(self, session_id: str, wake_id: str) -> Consent: ...


class RequestProgress:
    """Progress notifications on the caller's own request; a no-op when it sent no progress token."""

    def __init__(self, session: ServerSession) -> None:
        self._session = session

    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        await self._session.report_progress(progress, total, message)


class ClientSampler:
    """Sampling through the client's model, on the caller's own request stream."""

    def __init__(self, session: ServerSession, request_id: types.RequestId | None) -> None:
        self._session = session
        self._request_id = request_id

    async def sample(self, prompt: str, *, max_tokens: int) -> str:
        caps = self._session.client_capabilities
        if caps is None or caps.sampling is None or not self._session.can_send_request:
            raise SamplingUnavailableError("The client did not offer sampling on this connection.")
        result = await self._session.create_message(
            [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
            max_tokens=max_tokens,
            related_request_id=self._request_id,
        )
        if not isinstance(result.content, types.TextContent):
            raise SamplingUnavailableError("The client's model answered with something other than text.")
        return result.content.text


class ClientChildModel:
    """A child session's turns through the client's model: `sampling/createMessage` with tools, on the caller's
    own request stream (handshake era, and only where the client declared `sampling.tools`)."""

    mode: ChildMode = "sampling"

    def __init__(self, ctx: ServerRequestContext[Any], consent: SessionConsent) -> None:
        self._session = ctx.session
        self._request_id = ctx.request_id
        self._consent = consent

    def available(self) -> bool:
        caps = self._session.client_capabilities
        return (
            caps is not None
            and caps.sampling is not None
            and caps.sampling.tools is not None
            and self._session.can_send_request
        )

    async def turn(
        self, system: str, conversation: list[ModelTurn], tools: list[ToolSpec], *, max_tokens: int
    ) -> ModelTurn:
        if not self.available():
            raise SamplingUnavailableError("The client did not offer sampling with tools on this connection.")
        try:
            result = await self._session.create_message(
                [_sampling_message(turn) for turn in conversation],
                max_tokens=max_tokens,
                system_prompt=system,
                tools=[types.Tool(name=t.name, description=t.description, input_schema=t.input_schema) for t in tools],
                tool_choice=types.ToolChoice(mode="auto"),
                related_request_id=self._request_id,
            )
        except MCPError as exc:  # the client refused or failed: the loop stops and says so
            raise SamplingUnavailableError(f"The client's model did not answer: {exc.message[:200]}") from None
        blocks = result.content if isinstance(result.content, list) else [result.content]
        text = "".join(b.text for b in blocks if isinstance(b, types.TextContent))
        calls = [
            ModelCall(id=b.id, name=b.name, arguments=b.input) for b in blocks if isinstance(b, types.ToolUseContent)
        ]
        return ModelTurn(role="assistant", text=text, calls=calls)

    def consent_in(self, session_id: str, wake_id: str) -> Consent:
        return self._consent.in_session(session_id, wake_id)


def _sampling_message(turn: ModelTurn) -> types.SamplingMessage:
    content: list[types.SamplingMessageContentBlock] = []
    if turn.text:
        content.append(types.TextContent(type="text", text=turn.text))
    content += [types.ToolUseContent(type="tool_use", id=c.id, name=c.name, input=c.arguments) for c in turn.calls]
    content += [
        types.ToolResultContent(
            type="tool_result", tool_use_id=call_id, content=[types.TextContent(type="text", text=text)], is_error=error
        )
        for call_id, text, error in turn.results
    ]
    return types.SamplingMessage(role=turn.role, content=content)


def set_log_level(ctx: ServerRequestContext[Any], level: LogLevel) -> None:
    """`logging/setLevel` (handshake era): the least severe level this connection wants from now on."""
    connection_of(ctx).state[LOG_LEVEL_STATE] = level


class RequestLog:
    """Log notifications on the caller's own request stream.

    2026-07-28 sends only what the request opted into (`_meta`); the handshake era honours the connection's
    `logging/setLevel` (everything until one arrives).
    """

    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self._ctx = ctx

    async def log(self, level: LogLevel, message: str) -> None:
        ctx = self._ctx
        floor: LogLevel = connection_of(ctx).state.get(LOG_LEVEL_STATE, LOG_LEVELS[0])
        below_floor = LOG_LEVELS.index(level) < LOG_LEVELS.index(floor)
        if below_floor or level not in allowed_log_levels(ctx.protocol_version, ctx.meta):
            return
        params = types.LoggingMessageNotificationParams(level=level, data=message, logger=SERVER_NAME)
        notification = types.LoggingMessageNotification(params=params)
        await ctx.session.send_notification(notification, related_request_id=ctx.request_id)


def ports_for(
    ctx: ServerRequestContext[Any],
    consent: SessionConsent,
    variables: VariableInput | None = None,
    provider: ModelProvider | None = None,
) -> Ports:
    """The ports of one request: `consent` decides how (or whether) a person is asked to approve, `variables`
    how a missing variable's value is asked for. The operator's model (`provider`), where configured, runs
    children and latent tools in every era; else the client's, where it offers sampling."""
    if provider is not None:
        child_model: ChildModel = provider.child_model(consent.in_session)
        sampler: Sampler = provider.sampler()
    else:
        child_model = ClientChildModel(ctx, consent)
        child_model = child_model if child_model.available() else NoChildModel()
        sampler = ClientSampler(ctx.session, ctx.request_id)
    return Ports(
        consent=consent,
        progress=RequestProgress(ctx.session),
        sampler=sampler,
        client_log=RequestLog(ctx),
        child_model=child_model,
        variables=variables or NoVariableInput(),
    )
