"""`serve --transport http --workers 2`: real processes on one port, supervised by their parent.

Each response names the worker that answered (`X-Managed-Tools-Worker`), recorded per client by an httpx hook; the
pids are the parent's log lines and the wakes the workers recorded in the shared state.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import data
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from test_permissions import answer

from managed_tools.stores.db import Database

pytestmark = pytest.mark.anyio

WORKER_HEADER = "x-managed-tools-worker"
URL = re.compile(r"Streamable HTTP at (http://127\.0\.0\.1:\d+/mcp)")
STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")
WITHIN = 30.0
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
POST_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
PROBE_TOOLS = str(Path(__file__).resolve().parents[2] / "support" / "probe_tools.py")
CALLS = 12  # over fresh connections: each lands on either worker, all on one in 2 of 2**12 runs


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    log: Path
    url: str
    token: str
    data_dir: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def workers(self) -> dict[int, int]:
        """The pid of each worker, as last started (the parent's log)."""
        return {int(index): int(pid) for index, pid in STARTED.findall(self.text())}

    def serving(self, starts: int) -> bool:
        """Both workers known and `starts` worker start-ups complete so far (uvicorn's line, one per start)."""
        return len(self.workers()) == 2 and self.text().count("Application startup complete") >= starts

    def wait_for(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WITHIN
        while time.monotonic() < deadline:
            if done():
                return
            time.sleep(0.05)
        raise AssertionError(f"{what} within {WITHIN}s; log:\n{self.text()}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead: it waits only for its parent to reap it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    workspace, data_dir = tmp_path / "workspace", tmp_path / "data"
    workspace.mkdir()
    log = tmp_path / "server.log"
    argv = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
    argv += ["--data-dir", str(data_dir), "--transport", "http", "--port", "0", "--workers", "2", "--log-level", "INFO"]
    argv += ["--tools-module", PROBE_TOOLS]
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("MANAGED_TOOLS_TOKEN", None)
    with log.open("wb") as stderr:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    running = Server(proc, log, "", "", data_dir)
    try:
        running.wait_for(lambda: running.serving(2) or proc.poll() is not None, "two workers serving")
        assert proc.poll() is None, running.text()
        found = URL.search(running.text())
        assert found, running.text()
        running.url = found.group(1)
        running.token = (data_dir / "http-token").read_text().strip()  # one token, the parent's, for every worker
        yield running
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in running.workers().values():  # a failed test leaves no worker behind either
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@asynccontextmanager
async def client(server: Server, mode: str, trace: list[str], **kwargs: Any) -> AsyncIterator[Client]:
    """A real MCP client that opens a new connection for every request (no keep-alive), so that its requests
    land on either worker; `trace` collects the worker that answered each POST."""

    async def record(response: httpx2.Response) -> None:
        if response.request.method == "POST":
            trace.append(response.headers.get(WORKER_HEADER, "?"))

    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {server.token}"},
            limits=httpx2.Limits(max_keepalive_connections=0),
            event_hooks={"response": [record]},
        ) as http,
        Client(streamable_http_client(server.url, http_client=http), mode=mode, **kwargs) as mcp_client,
    ):
        yield mcp_client


async def calls(server: Server, mode: str = "auto", count: int = CALLS, *, ask: bool = False) -> list[str]:
    """`count` calls over fresh connections, and with `ask` one that waits for a person's yes (its question on the
    call's stream, the answer a request of its own); the worker that answered each request."""
    trace: list[str] = []
    approve = answer("accept", {"approve": True})
    async with client(server, mode, trace, elicitation_callback=approve) as mcp_client:
        for _ in range(count):
            assert data(await mcp_client.call_tool("session_get_snapshot", {}))["sessionId"]
        if ask:
            assert data(await mcp_client.call_tool("probe_danger", {"label": "asked"}))
    return trace


async def wake_pids(server: Server) -> set[int]:
    db = await Database.open(server.data_dir / "state.db")
    try:
        async with db.read() as tx:
            return {int(row[0]) for row in await tx.fetchall("SELECT DISTINCT pid FROM wakes", ())}
    finally:
        await db.close()


async def test_two_workers_both_serve_the_one_port(server: Server) -> None:
    trace = await calls(server)
    assert set(trace) == {"w0", "w1"}, trace
    pids = set(server.workers().values())
    assert len(pids) == 2 and server.proc.pid not in pids
    assert pids <= await wake_pids(server)  # each worker recorded its own calls in the one state


async def test_a_handshake_session_spans_the_workers(server: Server) -> None:
    """Its requests land on either worker; the one that did not open it forwards them to the one that did."""
    trace = await calls(server, mode="legacy", ask=True)
    assert len(set(trace)) == 1 and trace[0] in {"w0", "w1"}, trace  # every answer the owner's, all calls answered
    # Deterministically: a request of a session sent to the other worker's own socket is forwarded to the owner.
    (peers,) = server.data_dir.glob(".workers-*")
    assert peers.stat().st_mode & 0o777 == 0o700  # the workers' sockets: private to this user
    headers = {"Authorization": f"Bearer {server.token}", **POST_HEADERS}
    async with httpx2.AsyncClient(headers=headers) as http:
        opened = await http.post(server.url, json=INITIALIZE)
        owner, session = opened.headers[WORKER_HEADER], opened.headers["mcp-session-id"]
        assert session.startswith(f"{owner}.")
        in_session = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        await http.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=in_session)
    other = peers / f"w{1 - int(owner[1:])}.sock"
    host = {"host": server.url.split("/")[2]}  # the Host the port's clients send, checked by the owner
    async with httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=str(other)), headers=headers) as http:
        listed = await http.post("http://worker/mcp", json=TOOLS_LIST, headers={**in_session, **host})
        assert listed.status_code == 200 and listed.headers[WORKER_HEADER] == owner
        assert "session_get_snapshot" in listed.text
        unknown = {**in_session, "mcp-session-id": f"{owner}.no-such-session"}
        refused = await http.post("http://worker/mcp", json=TOOLS_LIST, headers={**unknown, **host})
        assert refused.status_code == 404 and refused.headers[WORKER_HEADER] == owner  # the SDK's: initialize again
        stranger = await http.post("http://worker/mcp", json=TOOLS_LIST, headers={**in_session, "host": "evil"})
        assert stranger.status_code == 421  # forwarded as it came: the owner's checks apply


async def test_a_legacy_sse_stream_gets_its_posts_from_either_worker(server: Server) -> None:
    """The stream's endpoint names its worker (`/messages/wN/`); a POST another worker accepts is forwarded."""
    answered: dict[str, list[str]] = {"GET": [], "POST": []}

    async def record(response: httpx2.Response) -> None:
        answered[response.request.method].append(response.headers.get(WORKER_HEADER, "?"))

    def fresh_connections(
        headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None
    ) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers=headers, timeout=timeout, limits=httpx2.Limits(max_keepalive_connections=0),
            event_hooks={"response": [record]},
        )  # fmt: skip

    sse = server.url.removesuffix("/mcp") + "/sse"
    transport = sse_client(
        sse, headers={"Authorization": f"Bearer {server.token}"}, httpx_client_factory=fresh_connections
    )
    async with Client(transport, mode="legacy") as mcp_client:
        for _ in range(CALLS):
            assert data(await mcp_client.call_tool("session_get_snapshot", {}))["sessionId"]
    (stream,) = answered["GET"]
    assert len(answered["POST"]) > CALLS and set(answered["POST"]) == {stream}, answered


async def test_a_killed_worker_is_started_again_and_the_server_keeps_answering(server: Server) -> None:
    before = server.workers()
    os.kill(before[0], signal.SIGKILL)
    assert await calls(server)  # every call answered: the other worker takes the connections meanwhile
    server.wait_for(lambda: server.workers()[0] != before[0], "worker 0 started again")
    assert f"worker 0 (pid {before[0]}) was ended by SIGKILL" in server.text()
    assert alive(server.workers()[0]) and server.workers()[1] == before[1]
    server.wait_for(lambda: server.serving(3), "the new worker serving")
    assert set(await calls(server)) == {"w0", "w1"}


def test_sigterm_to_the_parent_stops_every_worker(server: Server) -> None:
    pids = server.workers().values()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=WITHIN) == 128 + signal.SIGTERM
    assert not any(alive(pid) for pid in pids)
    assert not list(server.data_dir.glob(".workers-*"))  # the workers' private sockets are gone with them


def test_a_parent_killed_outright_leaves_no_worker(server: Server) -> None:
    pids = list(server.workers().values())
    server.proc.kill()
    server.proc.wait()
    server.wait_for(lambda: not any(alive(pid) for pid in pids), "no worker left")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_state_no_worker_can_open_is_one_line_and_the_single_servers_status(tmp_path: Path, workers: str) -> None:
    workspace, data_dir = tmp_path / "workspace", tmp_path / "data"
    workspace.mkdir()
    data_dir.mkdir(mode=0o700)
    (data_dir / "state.db").write_bytes(b"not a database, " * 512)
    argv = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
    argv += ["--data-dir", str(data_dir), "--transport", "http", "--port", "0", "--no-token", "--workers", workers]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=WITHIN, check=False)
    said = done.stderr.decode()
    failures = [line for line in said.splitlines() if line.startswith("managed-tools: ") and "serving" not in line]
    assert done.returncode == 2 and len(failures) == 1 and "Traceback" not in said, said
    assert "state.db" in failures[0]
