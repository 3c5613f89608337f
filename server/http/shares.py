"""Each OAuth principal's share of the open MCP sessions and legacy SSE streams (server/auth/fair_share.py).

`--max-sessions` bounds the Streamable HTTP sessions (the SDK's manager counts them) and, separately, the SSE
streams. With OAuth, one principal opening sessions until the bound is reached would leave every other principal
refused; so a principal past its share gets 429 with a message, and the others keep theirs. A session is the
principal's from the response that opened it (its `Mcp-Session-Id`) until the manager forgets it (DELETE, idle
timeout, stop); a request still opening one counts too, so a burst cannot slip past the share.
"""

from __future__ import annotations

from collections import Counter

import mcp_types as types
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from managed_tools.server.auth.fair_share import share_of
from managed_tools.server.auth.principal import current_principal
from managed_tools.server.http.headers import header

MCP_SESSION_ID = "mcp-session-id"
SESSION_ID_NAME = MCP_SESSION_ID.encode()


def json_rpc_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """A JSON-RPC error body, which MCP clients show as the request's error."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": types.INVALID_REQUEST, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def beyond_share(what: str, share: int) -> Response:
    return json_rpc_error(
        429, f"You have {share} {what} open already, your share of this server's; close one (or let it time out) "
        "and try again.", {"Retry-After": "30"}
    )  # fmt: skip


class SessionShares:
    """In front of the Streamable HTTP endpoint: a request that would open an MCP session (no `Mcp-Session-Id`)
    is refused once its principal holds its share."""

    def __init__(self, app: ASGIApp, manager: StreamableHTTPSessionManager) -> None:
        self._app = app
        self._manager = manager
        self._held: dict[str, set[str]] = {}  # owner -> the MCP session ids it opened
        self._opening: Counter[str] = Counter()  # owner -> its requests opening a session now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self._manager.max_sessions
        # Cheapest first: most requests carry an MCP session (or there are none), and only OAuth principals
        # have a share smaller than the whole.
        opens = scope["method"] == "POST" and header(scope, SESSION_ID_NAME) is None
        if self._manager.stateless or limit is None or not opens:
            await self._app(scope, receive, send)
            return
        owner = current_principal().owner
        share = share_of(owner, limit)
        if share >= limit:
            await self._app(scope, receive, send)
            return
        if self._holding(owner) + self._opening[owner] >= share:
            await beyond_share("MCP sessions", share)(scope, receive, send)
            return

        async def noted(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened = MutableHeaders(scope=message).get(MCP_SESSION_ID)
                if opened is not None:
                    self._held.setdefault(owner, set()).add(opened)
            await send(message)

        self._opening[owner] += 1
        try:
            await self._app(scope, receive, noted)
        finally:
            self._opening[owner] -= 1
            if not self._opening[owner]:
                del self._opening[owner]

    def _holding(self, owner: str) -> int:
        """How many of `owner`'s sessions are still open; those the manager has forgotten are dropped."""
        live = self._manager._server_instances  # the SDK's open sessions; it reports no session's end
        held = {session for session in self._held.get(owner, set()) if session in live}
        if held:
            self._held[owner] = held
        else:
            self._held.pop(owner, None)
        return len(held)
