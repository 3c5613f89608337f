"""The server's implementations of the catalogue's ports, over one MCP request."""

from __future__ import annotations

import mcp_types as types
from mcp.server.session import ServerSession

from tools.ports import ApprovalDecision, ApprovalRequest, SamplingUnavailableError


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
