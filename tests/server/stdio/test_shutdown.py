"""Stopping the server as a person or a supervisor does: SIGINT and SIGTERM over stdio and HTTP, a client that
leaves while a command runs, and the HTTP serving line. Real `managed-tools serve` subprocesses; a command is gone
when no process on the host has its marker argument (`sleep 300.25`) any more."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import alive

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime

pytestmark = pytest.mark.anyio

SERVE = [sys.executable, "-m", "managed_tools.server", "serve"]
STOP_WITHIN = 5.0
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
NOT_IN_STDERR = ("Traceback", "Exception ignored", " ERROR ")
INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "by-hand", "version": "0"},
}
POST_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
# One command left running in the background (its call returned a handle), one still followed by its call.
BACKGROUND = {"name": "shell_run", "arguments": {"command": "echo started > bg.pid; sleep 300.25", "waitMs": 0}}
IN_FLIGHT = {"name": "shell_run", "arguments": {"command": "echo started > fg.pid; sleep 300.5", "waitMs": 40000}}
MARKERS = {"bg.pid": "300.25", "fg.pid": "300.5"}
STOPPING = "The server is stopping"


def _serve_argv(workspace: Path, *extra: str) -> list[str]:
    data_dir = workspace.parent / "data"
    return [*SERVE, "--workspace", str(workspace), "--data-dir", str(data_dir), "--allow", "shell_run", *extra]


def _rpc(method: str, params: dict[str, Any], ident: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if ident is not None:
        message["id"] = ident
    return message


def _marker(workspace: Path, name: str) -> str:
    """The marker of the command that wrote `name`, once it has (it runs then)."""
    path = workspace / name
    deadline = time.monotonic() + 30
    while not path.is_file() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"the command never wrote {name}"
        time.sleep(0.02)
    assert alive(MARKERS[name])
    return MARKERS[name]


def _gone(marker: str) -> bool:
    deadline = time.monotonic() + 2  # a killed command's namespace is torn down a moment later
    while time.monotonic() < deadline:
        if not alive(marker):
            return True
        time.sleep(0.02)
    return False


async def _signal(send: Callable[[signal.Signals], None], signals: tuple[signal.Signals, ...]) -> None:
    for n, signum in enumerate(signals):
        if n:
            await anyio.sleep(0.1)  # the second arrives while the first's cleanup runs
        send(signum)


async def _commands_and_wakes(workspace: Path) -> tuple[list[str], list[bool]]:
    """What the server recorded: each command's status, and whether each wake was closed."""
    config = ServeConfig.build(workspace=workspace, data_dir=workspace.parent / "data")
    async with open_runtime(config) as runtime, runtime.db.read() as tx:
        commands = [row["status"] for row in await tx.fetchall("SELECT status FROM shell_commands")]
        wakes = [row["ended_at"] is not None for row in await tx.fetchall("SELECT ended_at FROM wakes")]
    return commands, wakes


class StdioServer:
    """`managed-tools serve` over pipes, spoken to by hand; stderr goes to a file (a full pipe would block it)."""

    def __init__(self, workspace: Path) -> None:
        self.stderr_path = workspace.parent / "stderr.log"
        with self.stderr_path.open("wb") as errors:
            self.proc = subprocess.Popen(
                _serve_argv(workspace), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors
            )
        self._pending = b""

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def reply(self, ident: int, timeout: float = 30) -> dict[str, Any]:
        """The answer to request `ident` (other messages, notifications, are skipped)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            line, newline, rest = self._pending.partition(b"\n")
            if newline:
                self._pending = rest
                message: dict[str, Any] = json.loads(line)
                if message.get("id") == ident:
                    return message
                continue
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no answer to request {ident}"
            if select.select([fd], [], [], remaining)[0]:
                chunk = os.read(fd, 65536)
                assert chunk, f"the server closed stdout before answering request {ident}"
                self._pending += chunk

    def start(self) -> None:
        self.send(_rpc("initialize", INITIALIZE, 1))
        self.reply(1)
        self.send(_rpc("notifications/initialized", {}))

    def exit_code(self, within: float) -> int:
        try:
            return self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the server did not exit within {within:g} s") from None

    def stderr(self) -> str:
        return self.stderr_path.read_text()


@contextmanager
def stdio_server(workspace: Path) -> Iterator[StdioServer]:
    server = StdioServer(workspace)
    try:
        server.start()
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
        for pipe in (server.proc.stdin, server.proc.stdout):
            if pipe is not None:
                pipe.close()


def _text(reply: dict[str, Any]) -> str:
    text: str = reply["result"]["content"][0]["text"]
    return text


# ---- stdio ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "signals",
    [(signal.SIGINT,), (signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)],
    ids=["SIGINT", "SIGTERM", "SIGINT-twice"],
)
async def test_a_signal_stops_the_stdio_server_like_a_closed_stdin(
    workspace: Path, signals: tuple[signal.Signals, ...]
) -> None:
    with stdio_server(workspace) as server:
        server.send(_rpc("tools/call", BACKGROUND, 2))
        assert '"status":"running"' in _text(server.reply(2))
        server.send(_rpc("tools/call", IN_FLIGHT, 3))
        groups = [_marker(workspace, "bg.pid"), _marker(workspace, "fg.pid")]
        started = time.monotonic()
        await _signal(server.proc.send_signal, signals)
        answer = server.reply(3, timeout=STOP_WITHIN)
        code = server.exit_code(within=STOP_WITHIN - (time.monotonic() - started))
    stderr = server.stderr()
    assert code == EXIT_CODES[signals[0]], stderr
    assert answer["result"]["isError"] and STOPPING in _text(answer)  # the call in flight was answered
    assert all(_gone(marker) for marker in groups)
    assert not [bad for bad in NOT_IN_STDERR if bad in stderr], stderr
    commands, wakes = await _commands_and_wakes(workspace)
    assert commands == ["killed", "killed"] and wakes == [True]  # recorded before the database closed


async def test_a_client_leaving_while_a_command_runs_logs_no_error(workspace: Path) -> None:
    with stdio_server(workspace) as server:
        server.send(_rpc("tools/call", BACKGROUND, 2))
        server.reply(2)
        groups = [_marker(workspace, "bg.pid")]
        assert server.proc.stdin is not None
        server.proc.stdin.close()  # the client is gone
        code = server.exit_code(within=STOP_WITHIN)
    stderr = server.stderr()
    assert code == 0, stderr
    assert all(_gone(marker) for marker in groups)
    assert not [bad for bad in NOT_IN_STDERR if bad in stderr], stderr  # was: Cannot operate on a closed database
    commands, wakes = await _commands_and_wakes(workspace)
    assert commands == ["killed"] and wakes == [True]


def test_stdin_from_a_file_is_served_to_its_end(workspace: Path) -> None:
    """A regular file cannot be polled (epoll refuses it): it is read plainly, to its end, then the server exits.
    Its end is the client leaving, so a call still running then is answered with an error, but answered."""
    requests = workspace.parent / "requests.jsonl"
    lines = [
        _rpc("initialize", INITIALIZE, 1),
        _rpc("notifications/initialized", {}),
        _rpc("tools/call", {"name": "environment_describe", "arguments": {}}, 2),
    ]
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with requests.open("rb") as stdin:
        proc = subprocess.run(_serve_argv(workspace), stdin=stdin, capture_output=True, timeout=60, check=False)
    answers = {json.loads(line)["id"]: json.loads(line) for line in proc.stdout.splitlines()}
    assert proc.returncode == 0, proc.stderr
    assert set(answers) == {1, 2} and "capabilities" in answers[1]["result"]


# ---- HTTP ----------------------------------------------------------------------------------------------------


def _base_url(line: str) -> str:
    assert "managed-tools: serving" in line, line
    return line.split("Streamable HTTP at ")[1].split("/mcp", maxsplit=1)[0]


async def _read_to_the_end(http: httpx2.AsyncClient, url: str, headers: dict[str, str], ended: list[str]) -> None:
    """Follow a stream until the server ends it; an end that is not clean raises (incomplete chunked read)."""
    async with http.stream("GET", url, headers={"accept": "text/event-stream", **headers}) as stream:
        assert stream.status_code == 200
        async for _ in stream.aiter_bytes():
            pass
    ended.append(url)


@pytest.mark.parametrize(
    "signals", [(signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)], ids=["SIGTERM", "SIGINT-twice"]
)
async def test_a_signal_stops_the_http_server_with_streams_open(
    workspace: Path, signals: tuple[signal.Signals, ...]
) -> None:
    log = workspace.parent / "stderr.log"
    with log.open("w") as errors:
        argv = _serve_argv(workspace, "--transport", "http", "--port", "0", "--no-token")
        proc = await anyio.open_process(argv, stdin=subprocess.DEVNULL, stdout=None, stderr=errors)
    try:
        with anyio.fail_after(30):
            while "\n" not in log.read_text():  # noqa: ASYNC110 (a file another process writes)
                await anyio.sleep(0.02)
        base = _base_url(log.read_text().splitlines()[0])
        ended: list[str] = []
        async with httpx2.AsyncClient(timeout=30) as http, anyio.create_task_group() as tasks:
            opened = await http.post(base + "/mcp", json=_rpc("initialize", INITIALIZE, 1), headers=POST_HEADERS)
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            headers = {**POST_HEADERS, **session}
            await http.post(base + "/mcp", json=_rpc("notifications/initialized", {}), headers=headers)
            tasks.start_soon(_read_to_the_end, http, base + "/mcp", session, ended)  # the session's GET stream
            tasks.start_soon(_read_to_the_end, http, base + "/sse", {}, ended)  # a legacy SSE stream
            background = await http.post(base + "/mcp", json=_rpc("tools/call", BACKGROUND, 2), headers=headers)
            assert '\\"status\\":\\"running\\"' in background.text
            answers: list[str] = []

            async def in_flight() -> None:
                reply = await http.post(base + "/mcp", json=_rpc("tools/call", IN_FLIGHT, 3), headers=headers)
                answers.append(reply.text)

            tasks.start_soon(in_flight)
            groups = [await anyio.to_thread.run_sync(_marker, workspace, name) for name in ("bg.pid", "fg.pid")]
            started = time.monotonic()
            await _signal(proc.send_signal, signals)
            with anyio.fail_after(STOP_WITHIN):
                await proc.wait()
        elapsed = time.monotonic() - started
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = log.read_text()
    assert proc.returncode == EXIT_CODES[signals[0]], stderr
    assert elapsed < STOP_WITHIN
    assert sorted(ended) == [base + "/mcp", base + "/sse"]  # both streams ended cleanly
    assert '"isError":true' in answers[0] and STOPPING in answers[0]
    assert all(_gone(marker) for marker in groups)
    assert not [bad for bad in NOT_IN_STDERR if bad in stderr], stderr  # was: two ERROR uvicorn.error lines
    commands, wakes = await _commands_and_wakes(workspace)
    assert commands == ["killed", "killed"] and wakes == [True]


def test_the_serving_line_comes_once_the_port_accepts_connections(workspace: Path) -> None:
    for _ in range(3):
        proc = subprocess.Popen(
            _serve_argv(workspace, "--transport", "http", "--port", "0", "--no-token"),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline().decode()
            host, port = _base_url(line).removeprefix("http://").rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as conn:  # at once: never refused
                conn.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
                answer = conn.makefile("rb").read()
            assert answer.startswith(b"HTTP/1.1 200"), answer
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=STOP_WITHIN) == 143
            if proc.stderr is not None:
                proc.stderr.close()
