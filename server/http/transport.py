"""Remote clients: Streamable HTTP at /mcp and legacy HTTP+SSE at /sse + /messages/, over the one MCP server.

Every request but the health check passes the guard first, on its headers alone: Host and Origin matched
exactly against the allowlists (421, 403; server/http/allowlist.py), then the static bearer token when one is set
(401) or, with OAuth, an access token and its scopes (401, 403; server/auth/oauth.py, which also serves the Protected
Resource Metadata), and an `Mcp-Managed-Session` header, which must name a session of this agent owned by the
caller (400). Body sizes are capped by the SDK's transports on both POST endpoints (413), the number of open MCP
sessions and SSE streams by `--max-sessions` (503; each OAuth principal holds at most a quarter of them, 429:
server/http/shares.py), each principal's calls by its quota (429: server/http/quotas.py), and connections by the
deadlines and bound of server/http/limits.py.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import re
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskStatus
from mcp.server import Server
from mcp.server.runner import serve_dual_era_loop
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from managed_tools.server.auth.fair_share import share_of
from managed_tools.server.auth.oauth import auth_middleware, metadata_routes
from managed_tools.server.auth.principal import current_principal
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.connection.attach import Attachments
from managed_tools.server.consent.board import Pages
from managed_tools.server.http.allowlist import Allowlist
from managed_tools.server.http.config import LOOPBACK_ALLOWED_HOSTS, HttpConfig
from managed_tools.server.http.headers import header, headers
from managed_tools.server.http.limits import ConnectionLimits, limited_protocol
from managed_tools.server.http.quotas import QuotaGate
from managed_tools.server.http.replica import ReplicaRoute
from managed_tools.server.http.request_ids import InFlightIds
from managed_tools.server.http.sessions import SESSION_HEADER, HttpAttachments, StreamAttachment
from managed_tools.server.http.shares import SessionShares, beyond_share, json_rpc_error
from managed_tools.server.http.workers import Peers, Place, WorkerRoute, messages_path
from managed_tools.server.mcp.app import InFlight, build_server
from managed_tools.server.runtime.extensions import Extensions
from managed_tools.server.runtime.otel import PROMETHEUS_CONTENT_TYPE, Installed
from managed_tools.server.runtime.stopping import Stopping
from managed_tools.stores import sessions
from managed_tools.stores.errors import DatabaseUnwritableError, StoreError
from managed_tools.tools.framework.context.context import Runtime

HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
MCP_PATH = "/mcp"
SSE_PATH = "/sse"
MESSAGES_PATH = "/messages/"
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
SESSION_HEADER_NAME = SESSION_HEADER.encode()
GUARDED_HEADERS = frozenset({b"host", b"origin", b"authorization"})
KNOWN_SESSIONS_CAP = 4096
LISTEN_BACKLOG = 2048  # uvicorn's own default, which it sets again when it starts serving
ANSWERS_WITHIN_SECONDS = 1.0  # at a stop, for the answers of ended calls to reach their clients


def build_app(
    runtime: Runtime,
    config: ServeConfig,
    http: HttpConfig,
    extensions: Extensions | None = None,
    pages: Pages | None = None,
    *,
    telemetry: Installed | None = None,
    place: Place | None = None,
) -> McpApp:
    """The app; with `place`, that of one worker among several (server/http/workers.py)."""
    calls = InFlight()
    server = build_server(
        runtime,
        transport="http",
        approval_wait_seconds=config.approval_wait_seconds,
        attachments=lambda: contextlib.aclosing(HttpAttachments(runtime, config.session)),
        extensions=extensions,
        calls=calls,
        pages=pages,
        request_state_keys=config.request_state_keys,
        relay=True,
    )
    # The Guard checks Host and Origin exactly before any transport sees a request; the SDK's own check
    # matches `name:*` as a string prefix and compares case-sensitively, so it is switched off.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    routes: list[Route | Mount] = [Route(HEALTH_PATH, _health, methods=["GET", "HEAD"])]
    if telemetry is not None and telemetry.prometheus:  # behind the token (or OAuth) like every other path
        routes.append(Route(METRICS_PATH, _metrics_of(telemetry), methods=["GET"]))
    manager: StreamableHTTPSessionManager | None = None
    if http.transport == "http":
        manager = StreamableHTTPSessionManager(
            app=server,
            stateless=http.stateless,
            security_settings=security,
            max_request_body_size=http.max_request_bytes,
            session_idle_timeout=http.session_idle_seconds,
            max_sessions=http.max_sessions,
        )
        endpoint: ASGIApp = StreamableHTTPASGIApp(manager)
        if not http.stateless:  # stateless HTTP serves each POST on its own: an id is never shared
            endpoint = InFlightIds(endpoint, max_body=http.max_request_bytes)
        routes.append(Route(MCP_PATH, endpoint=SessionShares(endpoint, manager)))
    messages = MESSAGES_PATH if place is None else messages_path(place.index)
    sse = SseServerTransport(messages, security_settings=security, max_request_body_size=http.max_request_bytes)
    routes += [
        Route(SSE_PATH, endpoint=SseEndpoint(server, sse, runtime, config.session, http.max_sessions), methods=["GET"]),
        Mount(messages, app=sse.handle_post_message),
    ]

    mcp_sessions = Sessions(manager)
    token = http.token.get_secret_value() if http.token is not None else None
    allowlist = Allowlist(http.allowed_hosts, http.allowed_origins)
    middleware = [Middleware(Guard, allowlist=allowlist, token=token)]
    if http.oauth is not None:
        metadata = metadata_routes(http.oauth)
        routes = [*metadata, *routes]
        middleware += auth_middleware(http.oauth, open_paths=[HEALTH_PATH, *(route.path for route in metadata)])
    middleware.append(Middleware(SessionHeader, runtime=runtime))
    middleware.append(
        Middleware(
            QuotaGate,
            quotas=config.quotas,
            db=runtime.db,
            running=calls.of,
            max_body=http.max_request_bytes,
            streamable_path=MCP_PATH,
            messages_path=messages,
        )
    )
    peers = None if place is None else Peers(place)
    if peers is not None:
        middleware.insert(0, Middleware(WorkerRoute, peers=peers))
    if http.replica is not None:  # outermost: a replica's prefix encloses the worker's
        middleware.insert(0, Middleware(ReplicaRoute, name=http.replica))
    return McpApp(
        calls, mcp_sessions, routes=routes, middleware=middleware, lifespan=lambda _: _lifespan(mcp_sessions, peers)
    )


@asynccontextmanager
async def _lifespan(mcp_sessions: Sessions, peers: Peers | None) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        if peers is not None:
            await stack.enter_async_context(peers.open())
        await stack.enter_async_context(mcp_sessions.running())
        yield


class Sessions:
    """The Streamable HTTP sessions (none with `--transport sse`), run so that a stop can end them before the
    HTTP server stops: the SDK then closes their streams itself, and their wakes close, while the connections
    are still open."""

    def __init__(self, manager: StreamableHTTPSessionManager | None) -> None:
        self._manager = manager
        self._end = anyio.Event()
        self._ended = anyio.Event()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The app's lifespan: the manager, and through it the server's lifespan (the HTTP attachments)."""
        if self._manager is None:
            yield
            return
        async with anyio.create_task_group() as tasks:
            await tasks.start(self._run, self._manager)
            try:
                yield
            finally:
                self._end.set()

    async def _run(self, manager: StreamableHTTPSessionManager, *, task_status: TaskStatus[None]) -> None:
        try:
            async with manager.run():
                task_status.started()
                await self._end.wait()
        finally:
            self._ended.set()

    async def end(self) -> None:
        if self._manager is not None:
            self._end.set()
            await self._ended.wait()


class McpApp(Starlette):
    """The app, with what a stop must end before the HTTP server stops."""

    def __init__(self, calls: InFlight, mcp_sessions: Sessions, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = calls
        self.mcp_sessions = mcp_sessions


async def _health(request: Request) -> Response:
    # For load balancers: open without a token, so it says nothing but that the process answers.
    return JSONResponse({"status": "ok"})


def _metrics_of(telemetry: Installed) -> Callable[[Request], Awaitable[Response]]:
    async def metrics(request: Request) -> Response:
        text = await anyio.to_thread.run_sync(telemetry.prometheus_text)
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)

    return metrics


class Guard:
    """Host/Origin, then the static bearer token, before anything else."""

    def __init__(self, app: ASGIApp, *, allowlist: Allowlist, token: str | None):
        self._app = app
        self._allowlist = allowlist
        self._token = token.encode() if token is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH:
            await self._app(scope, receive, send)
            return
        refusal = await self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self._app(scope, receive, send)

    async def _refusal(self, scope: Scope) -> Response | None:
        # Only headers are read here: a refused request is answered before any of its body is received.
        found = headers(scope, GUARDED_HEADERS)
        if not self._allowlist.admits_host(found.get(b"host")):
            return json_rpc_error(421, "This server does not answer to that Host header (see --allowed-host).")
        if not self._allowlist.admits_origin(found.get(b"origin")):
            return json_rpc_error(403, "Requests from that Origin are not allowed (see --allowed-origin).")
        authorization = found.get(b"authorization")
        if self._token is not None and not self._authorized(authorization):
            presented = authorization is not None
            challenge = 'Bearer realm="managed-tools"' + (', error="invalid_token"' if presented else "")
            why = "The bearer token is not valid." if presented else "This server requires a bearer token."
            return json_rpc_error(401, f"{why} Send Authorization: Bearer <token>.", {"WWW-Authenticate": challenge})
        return None

    def _authorized(self, header: str | None) -> bool:
        assert self._token is not None
        scheme, _, presented = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), self._token)


class SessionHeader:
    """An `Mcp-Managed-Session` header must name a session of this agent that the caller owns (after OAuth, which
    says who the caller is)."""

    def __init__(self, app: ASGIApp, *, runtime: Runtime):
        self._app = app
        self._runtime = runtime
        self._known: set[tuple[str, str]] = set()  # (owner, session) pairs already checked

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        named = header(scope, SESSION_HEADER_NAME) if scope["type"] == "http" else None
        refusal = None if named is None else await self._refusal(named, current_principal().owner)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self._app(scope, receive, send)

    async def _refusal(self, named: str, owner: str) -> Response | None:
        if (owner, named) in self._known:
            return None
        if not SESSION_ID.fullmatch(named):
            return json_rpc_error(
                400, "Mcp-Managed-Session must be a session id: up to 64 letters, digits, '-' or '_'."
            )
        try:
            async with self._runtime.db.read() as tx:
                await sessions.get_agent_session(tx, named, self._runtime.environment.agent_id, owner=owner)
        except DatabaseUnwritableError as exc:
            return json_rpc_error(503, str(exc))
        except StoreError as exc:
            return json_rpc_error(400, f"{exc} Omit Mcp-Managed-Session to start a new session.")
        if len(self._known) >= KNOWN_SESSIONS_CAP:
            self._known.clear()
        self._known.add((owner, named))  # sessions never change agent or owner, so a yes stays a yes
        return None


class SseEndpoint:
    """GET /sse: one legacy SSE connection, attached to a durable session from its first use to its end."""

    def __init__(
        self,
        server: Server[Attachments],
        transport: SseServerTransport,
        runtime: Runtime,
        default_session: str | None,
        max_streams: int,
    ) -> None:
        self._server = server
        self._transport = transport
        self._runtime = runtime
        self._default = default_session
        self._max = max_streams
        self._open: Counter[str] = Counter()  # open streams by owner (server/http/shares.py)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        owner = current_principal().owner
        share = share_of(owner, self._max)
        if self._open.total() >= self._max:
            await json_rpc_error(503, "Too many open SSE streams; try again later.")(scope, receive, send)
            return
        if self._open[owner] >= share:
            await beyond_share("SSE streams", share)(scope, receive, send)
            return
        named = header(scope, SESSION_HEADER_NAME)
        self._open[owner] += 1
        try:
            async with (
                contextlib.aclosing(StreamAttachment(self._runtime, named, self._default)) as attachments,
                self._transport.connect_sse(scope, receive, send) as (read_stream, write_stream),
            ):
                await serve_dual_era_loop(
                    self._server,
                    read_stream,
                    write_stream,
                    lifespan_state=attachments,
                    init_options=self._server.create_initialization_options(),
                )
        finally:
            self._open[owner] -= 1
            if not self._open[owner]:
                del self._open[owner]


def bind(http: HttpConfig) -> socket.socket:
    """The listening socket, bound before serving so that a taken port is a clear start-up error and
    `--port 0` can report the port it got. It listens at once: a client that read the announced address and
    connects right away is queued until uvicorn accepts, never refused."""
    host = http.host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, http.port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def announce(http: HttpConfig, sock: socket.socket) -> None:
    """Tell the person starting the server where it listens (stderr, never the token)."""
    host, port = sock.getsockname()[:2]
    base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    where = f"legacy SSE at {base}{SSE_PATH}"
    if http.transport == "http":
        where = f"Streamable HTTP at {base}{MCP_PATH}, " + where
    auth = "every request needs the bearer token" if http.token is not None else "no token (--no-token; loopback only)"
    if http.oauth is not None:
        auth = f"every request needs an access token from {http.oauth.issuer}"
    print(f"managed-tools: serving {where}; {auth}", file=sys.stderr, flush=True)
    if http.kept_token_file is not None and http.token is not None:
        # The server's own token, shown to the person who started it (never one they gave, which they know).
        token = http.token.get_secret_value()
        endpoint = f"{base}{MCP_PATH}" if http.transport == "http" else f"{base}{SSE_PATH}"
        client = {"type": "http" if http.transport == "http" else "sse", "url": endpoint,
                  "headers": {"Authorization": f"Bearer {token}"}}  # fmt: skip
        print(
            f"managed-tools: bearer token (kept in {http.kept_token_file}, the same at every start): {token}\n"
            f"managed-tools: client config: {json.dumps(client)}",
            file=sys.stderr,
            flush=True,
        )
    if http.binds_everywhere and set(http.allowed_hosts) <= set(LOOPBACK_ALLOWED_HOSTS):
        print(
            "managed-tools: only loopback Host headers are accepted; add --allowed-host NAME for the name "
            "remote clients use to reach this machine",
            file=sys.stderr,
        )


class OpenRequests:
    """Every request in progress, so that a stop ends them at once, streams included, and cleanly: one cancelled
    mid-response gets its final empty chunk (uvicorn logs an ERROR for a response left unfinished), one not yet
    answered (or arriving once stopping) gets 503. Left alone, an open stream would hold the stop for uvicorn's
    whole grace period and then be cut off with ERROR lines."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._open: dict[anyio.CancelScope, anyio.Event | None] = {}  # each request's scope: a POST's end
        self._stopping = False

    def refuse_new(self) -> None:
        self._stopping = True

    async def answered(self, within: float) -> None:
        """Wait, bounded, for the POSTs in progress to be answered (a GET is a stream: it never ends itself)."""
        with anyio.move_on_after(within):
            for done in [done for done in self._open.values() if done is not None]:
                await done.wait()

    def end_all(self) -> None:
        self._stopping = True
        for request in self._open:
            request.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = completed = False

        async def tracked(message: Message) -> None:
            nonlocal started, completed
            started = started or message["type"] == "http.response.start"
            completed = message["type"] == "http.response.body" and not message.get("more_body", False)
            await send(message)

        with anyio.CancelScope() as request:
            if self._stopping:
                request.cancel()
            done = anyio.Event() if scope["method"] == "POST" else None
            self._open[request] = done
            try:
                await self._app(scope, receive, tracked)
            finally:
                del self._open[request]
                if done is not None:
                    done.set()
        if request.cancelled_caught and not completed:
            if started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await json_rpc_error(503, "The server is stopping.")(scope, receive, send)


class HttpServer(uvicorn.Server):
    """uvicorn stopped by `stop()`; the signals are server/runtime/stopping.py's, so uvicorn installs no handlers."""

    def __init__(self, config: uvicorn.Config, app: McpApp, requests: OpenRequests) -> None:
        super().__init__(config)
        self._app = app
        self._requests = requests

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def stop(self) -> None:
        """New requests get 503; calls in flight are answered; MCP sessions end; whatever is still open (legacy
        SSE streams) is ended; then uvicorn closes the connections, now idle, and its lifespan (the wakes)."""
        self._requests.refuse_new()
        await self._app.calls.end_all()
        await self._requests.answered(within=ANSWERS_WITHIN_SECONDS)
        await self._app.mcp_sessions.end()
        self._requests.end_all()
        self.should_exit = True


def http_server(app: McpApp, http: HttpConfig, log_level: str) -> HttpServer:
    # Our logging setup, not uvicorn's; no access log (URLs carry SSE session ids). A stop ends open streams
    # at once (OpenRequests); the grace period only bounds what is left. HTTP/1.1 only, with our deadlines and
    # connection bound (server/http/limits.py); no WebSocket upgrades, which nothing here serves.
    limits = ConnectionLimits(
        header_timeout_seconds=http.header_timeout_seconds,
        body_timeout_seconds=http.body_timeout_seconds,
        max_connections=http.max_connections,
    )
    requests = OpenRequests(app)
    config = uvicorn.Config(
        requests,
        http=limited_protocol(limits),
        ws="none",
        log_config=None,
        log_level=log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=3,
    )
    return HttpServer(config, app, requests)


async def serve_http(server: HttpServer, sockets: list[socket.socket], stopping: Stopping) -> None:
    stopping.on_stop(server.stop)
    await server.serve(sockets=sockets)
