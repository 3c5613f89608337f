"""Several server processes on one port (`serve --transport http --workers N`), so a team server uses every core.

The parent binds the port once (server/http/transport.py `bind`), prints the address, then forks the workers after
start-up's imports and before anything opens (no database, thread or event loop yet): each worker inherits the one
listening socket and accepts on it, and opens its own runtime on the shared state (SQLite in WAL mode, or
PostgreSQL), where approvals, notices, quotas and durable sessions already cross processes. One inherited socket
rather than SO_REUSEPORT sockets: a port in a reuseport group can be joined by any process of the same user (a
command the tools run, with the shell's network on), which would then receive a share of the clients and their
bearer tokens; a port bound without it cannot be bound again.

The parent supervises: a worker that dies is forked again after a backoff, and logged; SIGINT or SIGTERM to the
parent is passed to every worker, which stops as a single server does, and one still running after
`STOP_SECONDS` is killed. Each worker asks the kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG), so a
parent killed outright leaves no worker behind.

What lives in one process's memory is routed to it. A handshake-era MCP session lives in the worker that opened
it, whose name its id carries (`Mcp-Session-Id: w1.<the SDK's id>`, inside a replica's prefix); a legacy SSE stream
is told to post to `/messages/w1/`. A request of such a session that another worker accepted is forwarded,
unchanged, to its worker over that worker's socket in a private directory of the data dir (mode 0700, outside
every mount), and the answer streamed back: every check (Host, token, OAuth, quotas) is the owning worker's, once.
2026-07-28 requests carry no MCP session and are served wherever they land; their sealed `requestState` is sealed
under one key ring for all the workers (the configured one, else a key the parent draws).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2
from starlette.types import ASGIApp, Receive, Scope, Send

from managed_tools.server.http.replica import MCP_SESSION_HEADER, serve_prefixed
from managed_tools.server.http.shares import json_rpc_error

log = logging.getLogger("managed_tools.workers")

STOP_SECONDS = 15.0  # a worker stops within its own bounds (3 s of HTTP grace, the bounded cleanup) well before
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
STEADY_SECONDS = 30.0  # a worker that served this long before dying restarts after the first backoff again
POLL_SECONDS = 0.1
PR_SET_PDEATHSIG = 1
MESSAGES_ROOT = "/messages/"
WORKER_HEADER = b"x-managed-tools-worker"  # which worker answered, for the operator's logs (as the replica's)
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"})


def worker_name(index: int) -> str:
    return f"w{index}"


def messages_path(index: int) -> str:
    """Where a worker's legacy SSE streams post their messages."""
    return f"{MESSAGES_ROOT}{worker_name(index)}/"


@dataclass(frozen=True)
class Place:
    """Where one worker serves: the shared port, its own index, and the sockets every worker is reached at."""

    index: int
    count: int
    listener: socket.socket
    peer: socket.socket  # where the other workers forward this one's requests
    peers: Path  # the private directory of the workers' sockets
    _ready: int  # the pipe on which a worker tells the parent it serves

    def ready(self) -> None:
        """Start-up went through: from now on a worker that dies is started again, not the server's end."""
        os.write(self._ready, b".")
        os.close(self._ready)

    def socket_of(self, index: int) -> Path:
        return self.peers / f"{worker_name(index)}.sock"

    @property
    def first(self) -> bool:
        """The worker that says at start-up what every worker would say alike (confinement, the dashboard)."""
        return self.index == 0


@dataclass
class _Worker:
    index: int
    pid: int | None = None
    started: float = 0.0
    failures: int = 0
    due: float = 0.0  # when a dead worker is forked again


@dataclass
class Supervisor:
    """The parent: forks `count` workers running `serve_worker(place)`, forks again any that dies, stops them all."""

    count: int
    listener: socket.socket
    data_dir: Path
    serve_worker: Callable[[Place], int]
    _workers: list[_Worker] = field(default_factory=list)
    _signum: int | None = None
    _served = False  # a worker said it serves: a death after that is restarted, before it the server cannot start
    _failed: int | None = None  # the exit status of a worker that could not start

    def run(self) -> int:
        """Serve until SIGINT or SIGTERM; the exit code is 128 + that signal, as a single server's, or the status
        of the first worker when it could not start (it said why on stderr, as a single server would)."""
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        peers = Path(tempfile.mkdtemp(prefix=".workers-", dir=self.data_dir))  # mode 0700
        previous = {signum: signal.signal(signum, self._signalled) for signum in (signal.SIGINT, signal.SIGTERM)}
        ready, told = os.pipe()
        os.set_blocking(ready, False)
        try:
            with _listening(peers, self.count) as sockets:
                self._workers = [_Worker(index) for index in range(self.count)]
                gc.freeze()  # start-up's objects, shared with the workers page for page until one writes
                while self._signum is None and self._failed is None:
                    self._reap()
                    self._served = self._served or _told(ready)
                    for worker in self._due():
                        place = Place(worker.index, self.count, self.listener, sockets[worker.index], peers, told)
                        worker.pid, worker.started = self._fork(place), time.monotonic()
                        log.info("worker %d started (pid %d)", worker.index, worker.pid)
                    time.sleep(POLL_SECONDS)
                self._stop_all(self._signum or signal.SIGTERM)
        finally:
            os.close(ready)
            os.close(told)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            shutil.rmtree(peers, ignore_errors=True)
        return 128 + self._signum if self._signum is not None else self._failed or 1

    def _signalled(self, signum: int, _frame: object) -> None:
        if self._signum is None:
            self._signum = signum
            log.info("%s: stopping %d workers", signal.Signals(signum).name, self.count)

    def _due(self) -> list[_Worker]:
        """The workers to fork now. At the start the first goes alone: it creates or migrates the state and
        recovers its WAL before the others open it."""
        now = time.monotonic()
        due = [worker for worker in self._workers if worker.pid is None and worker.due <= now]
        return due if self._served else [worker for worker in due if worker.index == 0]

    def _fork(self, place: Place) -> int:
        parent = os.getpid()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:  # the worker: never returns into the parent's loop
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
            os.setpgid(0, 0)  # a Ctrl-C reaches the parent alone, which stops the workers in order
            _die_with(parent)
            code = self.serve_worker(place)
        except BaseException:
            log.exception("worker %d failed", place.index)
        finally:
            logging.shutdown()
            os._exit(code)
        raise AssertionError("unreachable")  # pragma: no cover (os._exit)

    def _reap(self) -> None:
        for worker in self._workers:
            if worker.pid is None:
                continue
            pid, status = os.waitpid(worker.pid, os.WNOHANG)
            if pid == 0:
                continue
            lived = time.monotonic() - worker.started
            worker.failures = 0 if lived >= STEADY_SECONDS else worker.failures + 1
            delay = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** max(0, worker.failures - 1))
            if self._signum is None and not self._served:
                log.info("worker %d %s before it served: stopping", worker.index, _ended(status))
                self._failed = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1
            elif self._signum is None:
                log.warning(
                    "worker %d (pid %d) %s after %.1f s; starting it again in %.1f s",
                    worker.index, worker.pid, _ended(status), lived, delay,
                )  # fmt: skip
            worker.pid, worker.due = None, time.monotonic() + delay

    def _stop_all(self, signum: int) -> None:
        for worker in self._live():
            _signal(worker, signum)
        deadline = time.monotonic() + STOP_SECONDS
        while self._live() and time.monotonic() < deadline:
            self._reap()
            time.sleep(POLL_SECONDS / 2)
        for worker in self._live():
            log.warning("worker %d (pid %d) still running after %.0f s: killed", worker.index, worker.pid, STOP_SECONDS)
            _signal(worker, signal.SIGKILL)
            assert worker.pid is not None
            os.waitpid(worker.pid, 0)
            worker.pid = None

    def _live(self) -> list[_Worker]:
        return [worker for worker in self._workers if worker.pid is not None]


def _told(ready: int) -> bool:
    try:
        return bool(os.read(ready, 64))
    except BlockingIOError:
        return False


def _signal(worker: _Worker, signum: int) -> None:
    assert worker.pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(worker.pid, signum)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was ended by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def _die_with(parent: int) -> None:
    """SIGTERM (a graceful stop) for this worker when the parent dies; at once if it already has."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def _listening(peers: Path, count: int) -> Iterator[list[socket.socket]]:
    """Each worker's socket for forwarded requests, bound by the parent: a request forwarded to a worker that is
    being started again waits in its queue, as the port's clients do."""
    sockets = []
    try:
        for index in range(count):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(str(peers / f"{worker_name(index)}.sock"))
            sock.listen(256)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


class Peers:
    """This worker's connections to the others, for the requests it forwards; closed when it stops."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self._clients: dict[int, httpx2.AsyncClient] = {}

    async def send(
        self, index: int, method: str, url: str, headers: list[tuple[bytes, bytes]], body: AsyncIterator[bytes] | None
    ) -> httpx2.Response:
        """The request sent to worker `index`, its answer's head read; ConnectionError when that worker does not
        take it."""
        if index not in self._clients:
            limits = httpx2.Limits(max_connections=None, max_keepalive_connections=32)  # streams hold theirs
            transport = httpx2.AsyncHTTPTransport(uds=str(self.place.socket_of(index)), limits=limits, trust_env=False)
            timeout = httpx2.Timeout(connect=5.0, read=None, write=30.0, pool=None)  # streams and waits read long
            self._clients[index] = httpx2.AsyncClient(transport=transport, timeout=timeout, trust_env=False)
        client = self._clients[index]
        try:
            return await client.send(client.build_request(method, url, headers=headers, content=body), stream=True)
        except httpx2.HTTPError as exc:
            raise ConnectionError(f"worker {index}: {exc}") from None

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for client in self._clients.values():
                await client.aclose()


class WorkerRoute:
    """Names this worker in the MCP session ids and SSE message paths it hands out, and forwards a request naming
    another worker to it. Outermost but for the replica's prefix, so a forwarded request is checked once, there."""

    def __init__(self, app: ASGIApp, *, peers: Peers) -> None:
        self._app = app
        self._peers = peers
        self._place = peers.place
        self._name = worker_name(self._place.index).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        owner = self._owner(scope)
        if owner is not None and owner != self._place.index:
            await self._forward(owner, scope, receive, send)
            return
        await serve_prefixed(self._app, scope, receive, send, name=self._name, header=WORKER_HEADER)

    def _owner(self, scope: Scope) -> int | None:
        """The worker a request belongs to, when it names one of them; else None (served here)."""
        path: str = scope["path"]
        if path.startswith(MESSAGES_ROOT):
            name = path[len(MESSAGES_ROOT) :].split("/", 1)[0]
        else:
            session = next((value for key, value in scope["headers"] if key == MCP_SESSION_HEADER), None)
            if session is None or b"." not in session:
                return None
            name = session.split(b".", 1)[0].decode("latin-1")
        digits = name[1:]
        if not name.startswith("w") or not digits.isdigit() or len(digits) > 3:
            return None
        index = int(digits)
        return index if index < self._place.count else None

    async def _forward(self, index: int, scope: Scope, receive: Receive, send: Send) -> None:
        """The request as it came, to worker `index`; its answer streamed back as it is written."""
        query = scope.get("query_string", b"")
        url = f"http://{worker_name(index)}{scope['path']}" + (f"?{query.decode('latin-1')}" if query else "")
        headers = [(key, value) for key, value in scope["headers"] if key not in HOP_BY_HOP]
        body = _request_body(receive) if scope["method"] == "POST" else None
        try:
            response = await self._peers.send(index, scope["method"], url, headers, body)
        except ConnectionError:
            log.warning("worker %d did not take a request forwarded to it", index)
            await json_rpc_error(503, "The worker process serving this session is not answering; try again.")(
                scope, receive, send
            )
            return
        try:
            await send({
                "type": "http.response.start",
                "status": response.status_code,
                "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP],
            })  # fmt: skip
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_cancel_on_disconnect, receive, tasks.cancel_scope)
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                tasks.cancel_scope.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


async def _request_body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """A client that leaves a forwarded stream ends it (a legacy GET stream is otherwise read forever)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
