"""One JSON-RPC id in flight at a time per Streamable HTTP session (handshake era, stateful).

The SDK keys a session's open requests by their id (the transport's response streams by `str(id)`, the dispatcher
by the id itself) and a second request with an id already in flight overwrites the first's entry: both answers
then go to one stream, or none, and both clients wait for ever (issue 39 F10). So a request whose id is in flight
in its session is answered at once with HTTP 409 and a JSON-RPC error naming the id, before the SDK sees it; the
first is untouched. The id is the SDK's own reading of it (`7` and `"7"` are one id to it, so to us), and
the key holds the principal too, so a caller can never learn which ids another principal's session has open. The
2026-07-28 era and stateless HTTP need nothing: each POST there is its own exchange, and both are answered.
"""

from __future__ import annotations

import pydantic_core
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import JSONRPCRequest, RequestId, jsonrpc_message_adapter
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from managed_tools.server.auth.principal import current_principal
from managed_tools.server.http import bodies
from managed_tools.server.http.headers import header
from managed_tools.server.http.shares import SESSION_ID_NAME, json_rpc_error

PROTOCOL_VERSION_NAME = MCP_PROTOCOL_VERSION_HEADER.lower().encode()


class InFlightIds:
    """In front of the SDK's stateful Streamable HTTP app: each (principal, MCP session, request id) open once."""

    def __init__(self, app: ASGIApp, *, max_body: int) -> None:
        self._app = app
        self._max_body = max_body
        self._open: set[tuple[str, str, str]] = set()  # as many as requests in flight: bounded by connections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = header(scope, SESSION_ID_NAME) if scope["method"] == "POST" else None
        version = header(scope, PROTOCOL_VERSION_NAME)
        if session is None or (version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS):
            await self._app(scope, receive, send)  # no session, or the 2026-07-28 era: one exchange per POST
            return
        body, whole = await bodies.read(receive, self._max_body)
        replay = bodies.replaying(body, receive, whole)
        request_id = _request_id(body) if whole else None
        if request_id is None:  # a notification, an answer, or what the transport refuses itself (413, 400)
            await self._app(scope, replay, send)
            return
        key = (current_principal().owner, session, str(request_id))
        if key in self._open:
            message = (
                f"A request with id {request_id} is already in flight in this MCP session; wait for its answer, "
                "or send this one with an id of its own."
            )
            await json_rpc_error(409, message, request_id=request_id)(scope, replay, send)
            return
        self._open.add(key)
        try:
            await self._app(scope, replay, send)
        finally:
            self._open.discard(key)


def _request_id(body: bytes) -> RequestId | None:
    """The id of the JSON-RPC request the body holds, as the SDK reads it; None for anything else."""
    try:
        message = jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body), by_name=False)
    except (ValueError, ValidationError):
        return None
    return message.id if isinstance(message, JSONRPCRequest) else None
