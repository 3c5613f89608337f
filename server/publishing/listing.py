"""tools/list answered from its wire form, built once per registry version, principal view and protocol version.

The SDK shapes every answer itself: it dumps the handler's `ListToolsResult` (68 `Tool` models), validates the dump
against the protocol version's result schema and dumps it again: 15 ms in the handshake era and 25 ms at 2026-07-28
for our ~140 KB catalogue, on every tools/list (each stateless HTTP client lists when it connects, every stdio
start-up lists once). The answer depends only on which tools are served (the registry's version), which of them the
caller may see (its principal's view), the protocol version and whether the client negotiated MCP Apps, so the
first answer for each is kept and later ones are a copy of it. What the SDK checks before any handler runs is still
checked: the request's params against the protocol, and that the connection finished its handshake.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types import methods as protocol

from managed_tools.server.auth.principal import View, current_principal
from managed_tools.server.connection.state import connection_of
from managed_tools.tools.framework.definitions.registry import Registry

LISTING = "tools/list"


class ListedOnce:
    """The server middleware that keeps each tools/list answer as sent; `on_hit` is told of every listing it answers
    (the lister hears tools/list_changed from then on, as when the handler runs). `variant` is whatever else the
    handler's answer depends on in the request: whether the client negotiated MCP Apps (the approval card's tool
    is listed only then)."""

    def __init__(
        self,
        registry: Registry,
        *,
        on_hit: Callable[[ServerRequestContext[Any]], None],
        variant: Callable[[ServerRequestContext[Any]], bool],
    ) -> None:
        self._registry = registry
        self._on_hit = on_hit
        self._variant = variant
        self._answers: dict[tuple[int, View, str, bool], dict[str, Any]] = {}

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != LISTING:
            return await call_next(ctx)
        key = (self._registry.version, current_principal().view, ctx.protocol_version, self._variant(ctx))
        kept = self._answers.get(key)
        if kept is None:
            answer = await call_next(ctx)
            if isinstance(answer, dict):  # the SDK's wire form; anything else (an error) is not kept
                self._answers = {k: v for k, v in self._answers.items() if k[0] == key[0]} | {key: answer}
            return answer
        # The checks the SDK makes before a handler runs (mcp/server/runner.py `_inner`), in its order and with its
        # errors: malformed params, then a request before the handshake.
        protocol.validate_client_request(ctx.method, ctx.protocol_version, ctx.params)
        if not connection_of(ctx).initialize_accepted:
            raise MCPError(code=INVALID_PARAMS, message="Invalid request parameters", data="")
        self._on_hit(ctx)
        return dict(kept)  # the SDK copies the top level again; nothing below it is written to on the way out
