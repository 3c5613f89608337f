"""The real thing: `managed-tools serve` as a subprocess, spoken to over stdio by `mcp.Client` and by hand."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import ERAS, data
from mcp import Client, StdioServerParameters

from managed_tools.server.config.data_dir import default_data_dir

pytestmark = pytest.mark.anyio

SERVE = [sys.executable, "-m", "managed_tools.server", "serve"]


@asynccontextmanager
async def stdio_client(workspace: Path, *extra: str, mode: str = "auto") -> AsyncIterator[Client]:
    # The whole env: the SDK passes on only a few variables, and the server needs XDG_STATE_HOME and PYTHONPATH.
    params = StdioServerParameters(
        command=SERVE[0], args=[*SERVE[1:], "--workspace", str(workspace), *extra], env=dict(os.environ)
    )
    async with Client(params, mode=mode) as client:
        yield client


@pytest.mark.parametrize("mode", ERAS)
async def test_catalogue_over_stdio(workspace: Path, mode: str) -> None:
    async with stdio_client(workspace, mode=mode) as client:
        listing = await client.list_tools()
        events = data(await client.call_tool("session_get_events", {"limit": 5}))
        bad = await client.call_tool("session_get_events", {"limit": -1})
    assert "session_get_events" in {t.name for t in listing.tools}
    assert events["events"][0]["payload"]["transport"] == "stdio"
    assert bad.is_error
    assert (default_data_dir(workspace) / "state.db").is_file()  # tmp_path is already a real path
    assert not (workspace / ".managed-tools").exists()


async def test_resume_a_session_by_id(workspace: Path) -> None:
    async with stdio_client(workspace) as client:
        first = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
    async with stdio_client(workspace, "--session", first, mode="legacy") as client:
        again = data(await client.call_tool("session_get_snapshot", {}))
        traces = data(await client.call_tool("session_list_traces", {}))
    assert again["sessionId"] == first
    assert traces["count"] == 2


def test_unknown_session_is_a_clear_startup_error(workspace: Path) -> None:
    proc = subprocess.run(
        [*SERVE, "--workspace", str(workspace), "--session", "nope"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Cannot resume session nope: Session nope is not available to agent default." in proc.stderr


def test_a_missing_workspace_is_a_clear_startup_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*SERVE, "--workspace", str(tmp_path / "absent")], check=False, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2 and "is not a directory" in proc.stderr


def _rpc(method: str, params: dict[str, Any], ident: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}) + "\n"


def test_malformed_json_rpc_does_not_kill_the_server(workspace: Path) -> None:
    initialize = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "by-hand", "version": "0"},
    }
    lines = [
        "this is not json\n",
        '{"jsonrpc": "2.0", "id": 99, "method": \n',  # truncated
        '{"no": "jsonrpc"}\n',
        _rpc("initialize", initialize, 1),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n",
        "[1, 2, 3]\n",
        _rpc("no/such/method", {}, 2),
        _rpc("tools/call", {"name": "session_list", "arguments": {"limit": "x"}}, 3),
        _rpc("tools/call", {"name": "environment_describe"}, 4),
    ]
    # DEBUG logs outgrow a pipe's buffer, and a server blocked writing them would never answer: use a file.
    log = workspace.parent / "stderr.log"
    with log.open("w") as errors:
        proc = subprocess.Popen(
            [*SERVE, "--workspace", str(workspace), "--log-level", "DEBUG"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(lines))
    proc.stdin.flush()
    by_id: dict[Any, dict[str, Any]] = {}
    while not {1, 2, 3, 4} <= set(by_id):  # stdin stays open until every answer is in
        line = proc.stdout.readline()
        assert line, "the server closed stdout early"
        reply = json.loads(line)  # stdout carries nothing but protocol
        by_id[reply.get("id")] = reply
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    stderr = log.read_text()
    assert by_id[1]["result"]["protocolVersion"] == "2025-11-25"
    assert by_id[2]["error"]["code"] == -32601
    assert by_id[3]["result"]["isError"] is True
    assert "Invalid arguments for session_list" in by_id[3]["result"]["content"][0]["text"]
    assert by_id[4]["result"]["structuredContent"]["agentId"] == "default"
    assert "DEBUG" in stderr  # logs went to stderr


# Each frame the SDK cannot take as a message, with the id its answer must carry (None: `"id": null`) and the code.
UNREADABLE = [
    (
        '{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"read","arguments":{"path":"a\\ud800b"}}}',
        11,
        -32600,
    ),
    (
        '{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"read","arguments":'
        + "[" * 500
        + "]" * 500
        + "}}",
        12,
        -32600,
    ),
    (
        '{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"read","arguments":{"n":' + "9" * 5000 + "}}}",
        13,
        -32600,
    ),
    ('[{"jsonrpc":"2.0","id":14,"method":"ping"},{"jsonrpc":"2.0","id":"fifteen","method":"ping"}]', 14, -32600),
    ('[{"jsonrpc":"2.0","id":14,"method":"ping"},{"jsonrpc":"2.0","id":"fifteen","method":"ping"}]', "fifteen", -32600),
    ('{"jsonrpc":"2.0","id":1.5,"method":"ping"}', None, -32600),
    ('{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"read","argum', 16, -32700),
    # Cut inside the id: no id can be read (never the shorter `12`, or `"ab"`)
    ('{"jsonrpc":"2.0","id":123', None, -32700),
    ('{"jsonrpc":"2.0","id":"abc', None, -32700),
    ("this is not json", None, -32700),
]


def test_every_unreadable_frame_is_answered_at_once(workspace: Path) -> None:
    """Over stdio a frame the SDK cannot read used to get no answer, so the client waited for its own timeout."""
    proc = subprocess.Popen(
        [*SERVE, "--workspace", str(workspace)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    replies: queue.Queue[dict[str, Any]] = queue.Queue()

    def read_replies() -> None:
        for line in proc.stdout or ():
            replies.put(json.loads(line))

    threading.Thread(target=read_replies, daemon=True).start()
    initialize = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "by-hand", "version": "0"},
    }
    proc.stdin.write(_rpc("initialize", initialize, 1) + '{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    proc.stdin.flush()
    try:
        assert replies.get(timeout=30)["id"] == 1
        for frame in dict.fromkeys(f for f, _, _ in UNREADABLE):
            expected = [(i, c) for f, i, c in UNREADABLE if f == frame]
            proc.stdin.write(frame + "\n" + _rpc("ping", {}, 99))
            proc.stdin.flush()
            try:
                got = [replies.get(timeout=1.0) for _ in range(len(expected) + 1)]
            except queue.Empty:
                pytest.fail(f"no answer within a second to {frame[:60]}")
            assert [(r.get("id"), r["error"]["code"]) for r in got[:-1]] == expected, frame[:60]
            assert got[-1] == {"jsonrpc": "2.0", "id": 99, "result": {}}  # and it keeps serving
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0


def test_requests_read_before_stdin_ends_are_answered(workspace: Path) -> None:
    """`printf '<requests>' | managed-tools serve`: stdin ends right after the last request, and each is answered
    before the server exits (the SDK alone stops serving at the end of input, dropping what is in flight)."""
    initialize = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "by-hand", "version": "0"},
    }
    frames = [
        _rpc("initialize", initialize, 1),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n",
        _rpc("tools/list", {}, 2),
        _rpc("tools/call", {"name": "environment_describe", "arguments": {}}, 3),
    ]
    serve = [*SERVE, "--workspace", str(workspace)]
    done = subprocess.run(serve, input="".join(frames), capture_output=True, text=True, timeout=60, check=False)
    answers = {reply["id"]: reply for reply in map(json.loads, done.stdout.splitlines())}
    assert done.returncode == 0, done.stderr[-2000:]
    assert set(answers) == {1, 2, 3}
    assert len(answers[2]["result"]["tools"]) > 30 and not answers[3]["result"].get("isError")


async def test_two_server_processes_share_one_database(workspace: Path) -> None:
    seen: dict[str, str] = {}

    async def worker(label: str, mode: str) -> None:
        async with stdio_client(workspace, mode=mode) as client:
            seen[label] = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
            for _ in range(20):
                data(await client.call_tool("session_get_events", {"limit": 3}))
                data(await client.call_tool("session_list", {}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker, "a", "auto")
        tg.start_soon(worker, "b", "legacy")
    assert seen["a"] != seen["b"]
    async with stdio_client(workspace) as client:
        listed = data(await client.call_tool("session_list", {"limit": 10}))
        for label in ("a", "b"):
            snap = data(await client.call_tool("session_get_snapshot", {"sessionId": seen[label]}))
            assert snap["turns"] == 41  # every call of that process recorded its completion
    assert {seen["a"], seen["b"]} <= {s["sessionId"] for s in listed["sessions"]}


@pytest.mark.parametrize("mode", ERAS)
async def test_the_resource_list_changes_are_advertised(workspace: Path, mode: str) -> None:
    """Skills coming and going change the resource list; a handshake-era client only listens when told."""
    async with stdio_client(workspace, mode=mode) as client:
        resources = client.server_capabilities.resources
        assert resources is not None and resources.list_changed is True
