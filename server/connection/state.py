"""The SDK connection behind a request: per-connection state and teardown."""

from __future__ import annotations

from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.connection import Connection


def connection_of(ctx: ServerRequestContext[Any]) -> Connection:
    """The connection a request arrived on: one per stdio process or legacy-SSE stream, one per stateful MCP
    session over Streamable HTTP, one per request for 2026-07-28 and stateless traffic.

    mcp 2.3.0 documents `Connection.state` and `Connection.exit_stack` as the place for per-connection state
    and teardown, but its `ServerRequestContext` does not expose the connection yet (the SDK's own TODO L54);
    the request's session proxy holds it. mcp is pinned, and the tests of per-session state fail if this moves.
    """
    connection: Connection = ctx.session._connection
    return connection
