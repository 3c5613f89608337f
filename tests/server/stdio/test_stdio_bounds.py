"""A looping or broken stdio client against a real server process: a line longer than the limit is dropped as it
arrives (the server's memory stays bounded) and answered; a frame opening with a byte-order mark keeps its id."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from managed_tools.server.config.rules import DEFAULT_MAX_REQUEST_BYTES

SERVE = [sys.executable, "-m", "managed_tools.server", "serve"]
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "by-hand", "version": "0"}}


def _frame(method: str, params: dict[str, Any] | None, ident: int | str) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode() + b"\n"


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


class _Server:
    def __init__(self, workspace: Path) -> None:
        self.proc = subprocess.Popen(
            [*SERVE, "--workspace", str(workspace)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self._stdout: IO[bytes] = self.proc.stdout
        self.send(_frame("initialize", INITIALIZE, 1) + b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        assert self.reply()["id"] == 1

    def send(self, data: bytes) -> None:
        self.stdin.write(data)
        self.stdin.flush()

    def reply(self) -> dict[str, Any]:
        line = self._stdout.readline()
        assert line, "the server closed stdout"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        self.stdin.close()
        assert self.proc.wait(timeout=30) == 0


def test_a_300_mb_line_is_dropped_as_it_arrives_and_answered(workspace: Path) -> None:
    server = _Server(workspace)
    try:
        server.send(_frame("ping", None, 2))
        assert server.reply() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        idle = _peak_rss_kib(server.proc.pid)
        opening = b'{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"write","arguments":{"content":"'
        block = b"x" * (1 << 20)

        def flood() -> None:  # written from a thread: the server answers while the line still arrives
            server.stdin.write(opening)
            for _ in range(300):
                server.stdin.write(block)
            server.stdin.write(b'"}}}\n')
            server.stdin.write(_frame("ping", None, 3))
            server.stdin.flush()

        writer = threading.Thread(target=flood)
        started = time.monotonic()
        writer.start()
        answer = server.reply()
        writer.join(timeout=120)
        assert answer["id"] == 77 and answer["error"]["code"] == -32600
        assert str(DEFAULT_MAX_REQUEST_BYTES) in answer["error"]["message"]
        assert server.reply() == {"jsonrpc": "2.0", "id": 3, "result": {}}  # and it keeps serving
        grown_mb = (_peak_rss_kib(server.proc.pid) - idle) / 1024
        print(f"300 MB line: peak RSS {grown_mb:.1f} MB over idle, {time.monotonic() - started:.1f} s")
        assert grown_mb < 150
    finally:
        server.close()


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":123', None),  # the id is cut by the limit: none is read, never `12`
        (b'{"jsonrpc":"2.0","id":"abc","method":"ping","params":{"x":"', "abc"),
    ],
)
def test_an_oversized_line_carries_its_id_only_when_read_whole(
    workspace: Path, cut: bytes, expected: str | None
) -> None:
    server = _Server(workspace)
    try:
        # The opening kept of an oversized line is its first 4096 bytes: pad so the cut falls where it should.
        line = cut if expected is not None else b" " * (4096 - len(cut)) + cut
        server.send(line + b"9" * (DEFAULT_MAX_REQUEST_BYTES + 1) + b"\n" + _frame("ping", None, 4))
        answer = server.reply()
        assert answer["id"] == expected and answer["error"]["code"] == -32600
        assert server.reply()["id"] == 4
    finally:
        server.close()


def test_a_frame_opening_with_a_byte_order_mark_keeps_its_id(workspace: Path) -> None:
    server = _Server(workspace)
    try:
        server.send("\ufeff".encode() + _frame("ping", None, 5) + "\ufeff".encode() + _frame("ping", None, "six"))
        assert server.reply() == {"jsonrpc": "2.0", "id": 5, "result": {}}
        assert server.reply() == {"jsonrpc": "2.0", "id": "six", "result": {}}
    finally:
        server.close()
