"""Which durable session a Streamable HTTP request works in.

The HTTP server's lifespan runs once for every client, so the attachment is resolved per request:

- A **stateful MCP session** (handshake era, `Mcp-Session-Id`) attaches at its first tool call: to the session
  its `Mcp-Managed-Session` header names, else the server's `--session`, else a new session. It keeps that
  session and wake until the MCP session ends (DELETE, idle timeout, shutdown), when the wake is closed.
- A **request without an MCP session** (every 2026-07-28 request, and handshake-era requests to a
  `--stateless` server) works in the session its header names, else the server's `--session`, else the one
  session the server opens for all such requests. These requests share one wake per durable session, closed
  when the server stops.

A **legacy SSE stream** attaches at its first tool call or resource read, to the session its header names or
the server's `--session` or a new one, and keeps it for the stream's life (`StreamAttachment`).

The header is checked before the request reaches MCP (server/http/transport.py): it must name a session of this agent
that the caller owns. With OAuth every principal has its own sessions (server/auth/principal.py): the sessionless
session is one per principal, and the server's `--session` is the local principal's.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext

from managed_tools.server.auth.principal import current_principal
from managed_tools.server.connection.attach import attach, detach
from managed_tools.server.connection.state import connection_of
from managed_tools.stores.errors import StoreError
from managed_tools.stores.sessions import LOCAL_OWNER
from managed_tools.tools.framework.context.context import Attachment, Runtime

SESSION_HEADER = "mcp-managed-session"
ATTACHMENT_STATE = "managed-tools/attachment"


class HttpAttachments:
    def __init__(self, runtime: Runtime, default_session: str | None) -> None:
        self._runtime = runtime
        self._default = default_session
        # Each principal's session for requests that name none (the local one starts at `--session`); opened on
        # first use.
        self._sessionless: dict[str, str | None] = {LOCAL_OWNER: default_session}
        self._shared: dict[tuple[str, str], Attachment] = {}  # sessionless wakes by (owner, durable session)
        self._lock = anyio.Lock()  # so that two first requests do not open two wakes

    async def resolve(self, ctx: ServerRequestContext[Any]) -> Attachment:
        named = named_session(ctx)
        connection = connection_of(ctx)
        owner = current_principal().owner
        if connection.session_id is None:
            return await self._sessionless_attachment(named, owner)
        # The SDK serves an MCP session only to the credential that opened it, so its attachment is the owner's.
        attachment: Attachment | None = connection.state.get(ATTACHMENT_STATE)
        if attachment is None:
            async with self._lock:
                attachment = connection.state.get(ATTACHMENT_STATE)
                if attachment is None:
                    attachment = await _attach(self._runtime, named or _default(self._default, owner), "http", owner)
                    connection.state[ATTACHMENT_STATE] = attachment
                    connection.exit_stack.push_async_callback(detach, self._runtime, attachment)
        if named is not None and named != attachment.session_id:
            raise MCPError(
                code=types.INVALID_REQUEST,
                message=f"This MCP session works in session {attachment.session_id}; start a new MCP session "
                f"to work in {named}.",
            )
        return attachment

    async def _sessionless_attachment(self, named: str | None, owner: str) -> Attachment:
        target = named or self._sessionless.get(owner)
        if target is not None and (owner, target) in self._shared:
            return self._shared[owner, target]
        async with self._lock:
            target = named or self._sessionless.get(owner)
            if target is not None and (owner, target) in self._shared:
                return self._shared[owner, target]
            attachment = await _attach(self._runtime, target, "http-sessionless", owner)
            self._shared[owner, attachment.session_id] = attachment
            if named is None:
                self._sessionless[owner] = attachment.session_id
            return attachment

    async def aclose(self) -> None:
        for attachment in self._shared.values():
            await detach(self._runtime, attachment)
        self._shared.clear()


class StreamAttachment:
    """A legacy SSE stream's attachment: made at the stream's first tool call or resource read, kept for the
    stream's life. A stream that never does any work (abandoned, or opened only to probe) leaves no session."""

    def __init__(self, runtime: Runtime, named: str | None, default_session: str | None) -> None:
        self._runtime = runtime
        self._named = named
        self._default = default_session
        self._attachment: Attachment | None = None
        self._lock = anyio.Lock()

    async def resolve(self, ctx: ServerRequestContext[Any]) -> Attachment:
        if self._attachment is not None:
            return self._attachment
        async with self._lock:  # so that two first calls do not open two wakes
            if self._attachment is None:
                # The SDK serves an SSE stream's messages only to the credential that opened it.
                owner = current_principal().owner
                session_id = self._named or _default(self._default, owner)
                self._attachment = await _attach(self._runtime, session_id, "sse", owner)
            return self._attachment

    async def aclose(self) -> None:
        if self._attachment is not None:
            await detach(self._runtime, self._attachment)


def _default(default_session: str | None, owner: str) -> str | None:
    """The server's `--session` is the local principal's."""
    return default_session if owner == LOCAL_OWNER else None


async def _attach(runtime: Runtime, session_id: str | None, transport: str, owner: str) -> Attachment:
    try:
        return await attach(runtime, session_id, transport, owner=owner)
    except StoreError as exc:  # the session went away, or the database stayed locked
        raise MCPError(code=types.INVALID_REQUEST, message=str(exc)) from None


def named_session(ctx: ServerRequestContext[Any]) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    value: str | None = headers.get(SESSION_HEADER) if headers is not None else None
    return value
