"""Each OAuth principal's share of the open MCP sessions and legacy SSE streams (server/auth/fair_share.py).

`--max-sessions` bounds the Streamable HTTP sessions (the SDK's manager counts them) and, separately, the SSE
streams. With OAuth, one principal opening sessions until the bound is reached would leave every other principal
refused; so a principal past its share gets 429 with a message, and the others keep theirs. A session is the
principal's from the response that opened it (its `Mcp-Session-Id`) until the manager forgets it (DELETE, idle
timeout, stop); a request still opening one counts too, so a burst cannot slip past the share.

At the bound, a request opening a session no longer waits for an idle timeout (30 minutes of 503 after a client
abandoned its sessions): the least recently used idle session (no request in flight) is ended to make room, the
opener's own first, else anyone's. Only when every session is busy does the opener get the 503.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import mcp_types as types
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from managed_tools.server.auth.fair_share import share_of
from managed_tools.server.auth.principal import current_principal
from managed_tools.server.http.headers import header

log = logging.getLogger(__name__)

MCP_SESSION_ID = "mcp-session-id"
SESSION_ID_NAME = MCP_SESSION_ID.encode()


def json_rpc_error(
    status: int, message: str, headers: dict[str, str] | None = None, *, request_id: types.RequestId | None = None
) -> Response:
    """A JSON-RPC error body, which MCP clients show as the request's error."""
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": types.INVALID_REQUEST, "message": message}}
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
        self._used: OrderedDict[str, None] = OrderedDict()  # MCP session ids, least recently asked first
        self._busy: Counter[str] = Counter()  # MCP session id -> its requests in flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self._manager.max_sessions
        if self._manager.stateless or limit is None:
            await self._app(scope, receive, send)
            return
        session = header(scope, SESSION_ID_NAME)
        if session is not None:
            await self._in_session(session, scope, receive, send)
            return
        if scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        owner = current_principal().owner
        share = share_of(owner, limit)
        if share < limit and self._holding(owner) + self._opening[owner] >= share:
            await beyond_share("MCP sessions", share)(scope, receive, send)
            return
        if len(self._manager._server_instances) >= limit:
            await self._make_room(owner)

        async def noted(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened = MutableHeaders(scope=message).get(MCP_SESSION_ID)
                if opened is not None:
                    self._held.setdefault(owner, set()).add(opened)
                    self._used[opened] = None
            await send(message)

        with _counted(self._opening, owner):
            await self._app(scope, receive, noted)

    async def _in_session(self, session: str, scope: Scope, receive: Receive, send: Send) -> None:
        """A request in an open MCP session: that session is busy while it runs, and the most recently used."""
        if session in self._used:
            self._used.move_to_end(session)
        with _counted(self._busy, session):
            await self._app(scope, receive, send)
        if session in self._used:
            self._used.move_to_end(session)

    async def _make_room(self, owner: str) -> None:
        """End the least recently used idle session, `owner`'s own first, so that a new client is served."""
        live = self._manager._server_instances
        for gone in [session for session in self._used if session not in live]:
            del self._used[gone]
        idle = [session for session in self._used if not self._busy[session]]
        own = self._held.get(owner, set())
        victim = next((session for session in idle if session in own), idle[0] if idle else None)
        if victim is None:
            return  # every session is busy: the SDK answers 503
        log.info("ending idle MCP session %s… to make room for a new one", victim[:8])
        del self._used[victim]
        await self._manager._discard_session(victim, live[victim])

    def _holding(self, owner: str) -> int:
        """How many of `owner`'s sessions are still open; those the manager has forgotten are dropped."""
        live = self._manager._server_instances  # the SDK's open sessions; it reports no session's end
        held = {session for session in self._held.get(owner, set()) if session in live}
        if held:
            self._held[owner] = held
        else:
            self._held.pop(owner, None)
        return len(held)


@contextmanager
def _counted(counter: Counter[str], key: str) -> Iterator[None]:
    """`key` counted in `counter` while the block runs (and gone from it at zero)."""
    counter[key] += 1
    try:
        yield
    finally:
        counter[key] -= 1
        if not counter[key]:
            del counter[key]
