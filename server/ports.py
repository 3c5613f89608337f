"""The server's implementations of the catalogue's ports, over one MCP request."""

from __future__ import annotations

from typing import Any, get_args

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.connection import allowed_log_levels
from mcp.server.session import ServerSession

from managed_tools.server import SERVER_NAME
from managed_tools.server.connection import connection_of
from managed_tools.tools.context import Ports
from managed_tools.tools.ports import ApprovalDecision, ApprovalRequest, Consent, LogLevel, SamplingUnavailableError

LOG_LEVELS: tuple[LogLevel, ...] = get_args(LogLevel)  # least severe first
LOG_LEVEL_STATE = "managed-tools/logLevel"


class NoConsent:
    """For work that never asks a person (reading resources): any question is refused."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(status="unavailable")


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


def ports_for(ctx: ServerRequestContext[Any], consent: Consent) -> Ports:
    """The ports of one request: `consent` decides how (or whether) a person is asked."""
    return Ports(
        consent=consent,
        progress=RequestProgress(ctx.session),
        sampler=ClientSampler(ctx.session, ctx.request_id),
        client_log=RequestLog(ctx),
    )
