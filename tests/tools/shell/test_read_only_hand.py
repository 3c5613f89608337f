"""The read-only hand (`bash`) against what would hold it: a FIFO, a socket (issue 23, N8), end to end through a
real MCP client. `read` refuses anything but a regular file at once; `bash cat` must too, and so must `grep` and
`glob`, whose ripgrep would otherwise wait on a FIFO for a writer that never comes.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from conftest import Connect, data, error_text

from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio
QUICK = 5.0  # seconds: far below the 30 s timeout the calls carry, so a call that waited on the FIFO fails


@pytest.mark.parametrize(
    ("command", "args"),
    [("cat", ["fifo"]), ("head", ["-n", "1", "fifo"]), ("tail", ["fifo"]), ("wc", ["-l", "notes.txt", "fifo"])],
)
async def test_bash_refuses_a_fifo_at_once(
    runtime: Runtime, connect: Connect, workspace: Path, command: str, args: list[str]
) -> None:
    os.mkfifo(workspace / "fifo")
    (workspace / "notes.txt").write_text("one\n")
    async with connect(runtime) as client:
        started = time.monotonic()
        refused = error_text(await client.call_tool("bash", {"command": command, "args": args, "timeoutMs": 30_000}))
        read = error_text(await client.call_tool("read", {"path": "fifo"}))
    assert time.monotonic() - started < QUICK
    assert refused == "/workspace/fifo is a named pipe (FIFO); only regular files are read (it could block)."
    assert refused == read  # the one rule, worded once


async def test_bash_refuses_a_socket_and_a_directory_as_read_does(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / "dir").mkdir()
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(workspace / "sock"))
        async with connect(runtime) as client:
            sock = error_text(await client.call_tool("bash", {"command": "cat", "args": ["sock"]}))
            folder = error_text(await client.call_tool("bash", {"command": "head", "args": ["dir"]}))
            listed = data(await client.call_tool("bash", {"command": "ls", "args": ["-1"]}))
            stat = data(await client.call_tool("bash", {"command": "stat", "args": ["-c", "%F", "sock"]}))
    assert sock == "/workspace/sock: it is a socket or a device, not a regular file; only regular files are read."
    assert folder == "/workspace/dir is a directory, not a regular file; use glob to list it."
    assert listed["stdout"].split() == ["dir", "sock"] and stat["stdout"] == "socket\n"  # naming it is fine


async def test_grep_and_glob_do_not_wait_on_a_fifo(runtime: Runtime, connect: Connect, workspace: Path) -> None:
    os.mkfifo(workspace / "fifo")
    (workspace / "a.txt").write_text("needle\n")
    async with connect(runtime) as client:
        started = time.monotonic()
        named = error_text(await client.call_tool("grep", {"path": "fifo", "query": "needle"}))
        searched = data(await client.call_tool("grep", {"path": ".", "query": "needle"}))
        globbed = data(await client.call_tool("glob", {"pattern": "*"}))
    assert time.monotonic() - started < QUICK
    assert "is a named pipe (FIFO)" in named
    assert [hit["path"] for hit in searched["hits"]] == ["/workspace/a.txt"]
    assert "/workspace/a.txt" in globbed["matches"]
