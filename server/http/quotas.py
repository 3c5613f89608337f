"""Each principal's quota of an HTTP server's calls (config.json `quotas`): calls per minute, calls running at once,
and permission requests waiting for a person.

A principal past one gets `429 Too Many Requests` with `Retry-After` and a JSON-RPC error saying which bound and
when to try again, before the call reaches the server; the others are not slowed. On legacy SSE, whose clients
drop their stream on an HTTP error, the POST is accepted and the call is answered with an error result saying the
same (kind `quota_exceeded`). Only `tools/call` requests count (a listing, a notification or an answer to the
server's question never does). Calls per minute is a sliding window of the last 60 seconds. Calls running at once
are held from admission until the response ends on Streamable HTTP (where a call's answer ends its POST); on legacy
SSE the calls the server is running for that principal count (server/mcp/app.py InFlight). Waiting requests are
counted in the store, at most once a second per principal. A principal with no bound passes untouched: its request
bodies are not even read here.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.types import ASGIApp, Receive, Scope, Send

from managed_tools.server.auth.principal import current_principal
from managed_tools.server.config.user_config import Quota, QuotasConfig
from managed_tools.server.http import bodies
from managed_tools.server.http.shares import json_rpc_error
from managed_tools.server.mcp.app import QUOTA_REFUSAL
from managed_tools.stores.db import Database
from managed_tools.stores.sessions import LOCAL_OWNER

WINDOW_SECONDS = 60.0
PENDING_FRESH_SECONDS = 1.0
PENDING_RETRY_SECONDS = 10
MAX_PRINCIPALS = 10_000  # principals remembered at once; the least recently seen are forgotten first
V = TypeVar("V")


class QuotaGate:
    """ASGI middleware in front of both POST endpoints (after authentication, so the principal is known)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        quotas: QuotasConfig,
        db: Database,
        running: Callable[[str], int],
        max_body: int,
        streamable_path: str,
        messages_path: str,
    ) -> None:
        self._app, self._quotas, self._db, self._running = app, quotas, db, running
        self._max_body, self._streamable, self._messages = max_body, streamable_path, messages_path
        self._window: dict[str, deque[float]] = {}
        self._admitted: dict[str, int] = {}  # Streamable HTTP calls admitted and not yet answered
        self._pending: dict[str, tuple[float, int]] = {}  # owner -> (when counted, waiting requests)
        self._bounded = quotas.token.bounded or quotas.oauth.bounded  # else every request passes untouched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._bounded or scope["type"] != "http" or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        streamed = scope["path"] == self._streamable  # its answer ends this request (on SSE, it goes on the stream)
        if not (streamed or scope["path"].startswith(self._messages)):
            await self._app(scope, receive, send)
            return
        owner = current_principal().owner
        quota = self._quotas.token if owner == LOCAL_OWNER else self._quotas.oauth
        if not quota.bounded:
            await self._app(scope, receive, send)
            return
        body, whole = await bodies.read(receive, self._max_body)
        replay = bodies.replaying(body, receive, whole)
        calls = _tool_calls(body) if whole else 0
        if not calls:  # too large (the transport says 413) or no call in it: not ours to count
            await self._app(scope, replay, send)
            return
        refusal = await self._refusal(owner, quota, calls, held=streamed)
        if refusal is not None and streamed:
            message, retry = refusal
            await json_rpc_error(429, message, {"Retry-After": str(retry)})(scope, receive, send)
            return
        if not streamed:
            if refusal is not None:  # an SSE client drops its stream on an HTTP error: refused in the call instead
                scope.setdefault("state", {})[QUOTA_REFUSAL] = refusal[0]
            await self._app(scope, replay, send)
            return
        self._admitted[owner] = self._admitted.get(owner, 0) + calls
        try:
            await self._app(scope, replay, send)
        finally:
            self._admitted[owner] -= calls
            if not self._admitted[owner]:
                del self._admitted[owner]

    async def _refusal(self, owner: str, quota: Quota, calls: int, *, held: bool) -> tuple[str, int] | None:
        """Why `owner` may not make `calls` more calls now, and in how many seconds to try again; None: it may."""
        now = time.monotonic()
        if quota.concurrent_calls is not None:
            running = self._admitted.get(owner, 0) if held else self._running(owner)
            if running + calls > quota.concurrent_calls:
                return (
                    f"You have {running} tool calls running, and your quota is {quota.concurrent_calls} at once; "
                    "wait for one to finish.",
                    1,
                )
        if quota.pending_approvals is not None:
            waiting = await self._waiting(owner, now)
            if waiting >= quota.pending_approvals:
                return (
                    f"You have {waiting} permission requests waiting for a person, your quota; new calls wait "
                    "until some are answered (managed-tools pending lists them).",
                    PENDING_RETRY_SECONDS,
                )
        if quota.calls_per_minute is not None:
            window = self._window_of(owner, now)
            if len(window) + calls > quota.calls_per_minute:
                retry = math.ceil(window[0] + WINDOW_SECONDS - now) if window else 1
                return (
                    f"You have made {len(window)} tool calls in the last minute, your quota is "
                    f"{quota.calls_per_minute}; try again in {retry} s.",
                    max(retry, 1),
                )
            window.extend([now] * calls)
        return None

    def _window_of(self, owner: str, now: float) -> deque[float]:
        window = self._window.pop(owner, None) or deque()
        while window and window[0] <= now - WINDOW_SECONDS:
            window.popleft()
        _remember(self._window, owner, window)
        return window

    async def _waiting(self, owner: str, now: float) -> int:
        counted = self._pending.get(owner)
        if counted is not None and now - counted[0] < PENDING_FRESH_SECONDS:
            return counted[1]
        async with self._db.read() as tx:
            waiting = int(
                await tx.scalar(
                    "SELECT COUNT(*) FROM approvals a JOIN sessions s ON s.id = a.session_id "
                    "WHERE a.status = 'pending' AND s.owner = ?",
                    (owner,),
                )
            )
        _remember(self._pending, owner, (now, waiting))
        return waiting


def _remember(kept: dict[str, V], owner: str, value: V) -> None:
    """Keep `value` as `owner`'s, newest last: the dict's order is the order principals were last seen, so past
    MAX_PRINCIPALS the one seen longest ago is forgotten."""
    kept.pop(owner, None)
    kept[owner] = value
    if len(kept) > MAX_PRINCIPALS:
        del kept[next(iter(kept))]


def _tool_calls(body: bytes) -> int:
    """How many `tools/call` requests the JSON-RPC body holds (one message or a batch); 0 when it is not JSON."""
    try:
        document: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return 0
    messages = document if isinstance(document, list) else [document]
    return sum(1 for m in messages if isinstance(m, dict) and m.get("method") == "tools/call" and "id" in m)
