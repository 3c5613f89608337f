"""`state.db`, `state.db-wal` and `state.db-shm` are one unit: any of them deleted or replaced under a running
server process is noticed before the next write, no write is acknowledged into a file that a kill then loses, a
backup renamed over `state.db` gets its stale companions moved aside at the next start, and a damaged file gives a
tool error of a clear kind, never a JSON-RPC error, with the server serving again once the files are sane.

Every server here is a real `managed-tools serve` process over stdio; the files are changed for real under it, and
the kills are real SIGKILLs.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import mcp_types as types
import pytest
from conftest import data
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from support.crash_workload import LAUNCH

from managed_tools.server.publishing.publish import ERROR_META_KEY

pytestmark = pytest.mark.anyio


def kind(result: types.CallToolResult) -> str:
    return str((result.meta or {}).get(ERROR_META_KEY, {}).get("kind"))


@asynccontextmanager
async def server(workspace: Path, data_dir: Path, log: Path) -> AsyncIterator[tuple[Client, int]]:
    """A server process on `data_dir` (its stderr appended to `log`) and its pid."""
    pid_file = data_dir.parent / f"{data_dir.name}.pid"
    pid_file.unlink(missing_ok=True)
    args = ["-c", LAUNCH, str(pid_file), "--workspace", str(workspace), "--data-dir", str(data_dir)]
    with log.open("a") as errors:
        params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
        async with Client(stdio_client(params, errlog=errors)) as client:
            yield client, int(pid_file.read_text())


async def write(client: Client, content: str) -> types.CallToolResult:
    return await client.call_tool("memory_write", {"target": "working_buffer", "content": content})


def kept(database: Path) -> set[str]:
    """The memory contents `database` holds, read the way a next start reads it (its log replayed, if any)."""
    with closing(sqlite3.connect(database)) as conn:
        return {str(row[0]).strip() for row in conn.execute("SELECT content FROM memory_versions")}


def integrity(database: Path) -> str:
    with closing(sqlite3.connect(database)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


class Killed(Exception):
    """The server was killed on purpose: its client's transport breaking after that is expected."""


def kill(pid: int) -> None:
    """SIGKILL: the server's files stay as they are at this moment (the client's exit waits for the process)."""
    os.kill(pid, signal.SIGKILL)
    raise Killed


def only_the_kill(exc: BaseException) -> None:
    """Re-raise `exc` unless it is the kill (or the client's transport breaking with it): a failed assertion inside
    the killed server's block still fails the test."""
    leaves = [exc]
    while any(isinstance(leaf, BaseExceptionGroup) for leaf in leaves):
        leaves = [e for leaf in leaves for e in (leaf.exceptions if isinstance(leaf, BaseExceptionGroup) else [leaf])]
    if not any(isinstance(leaf, Killed) for leaf in leaves) or any(isinstance(leaf, AssertionError) for leaf in leaves):
        raise exc


async def test_f3_a_log_deleted_under_a_running_server_loses_nothing_acknowledged(
    workspace: Path, tmp_path: Path
) -> None:
    data_dir, log = tmp_path / "data", tmp_path / "server.log"
    database = data_dir / "state.db"
    acknowledged = []
    try:
        async with server(workspace, data_dir, log) as (client, pid):
            for n in range(8):
                data(await write(client, f"before {n}"))
                acknowledged.append(f"before {n}")
            (data_dir / "state.db-wal").unlink()
            refused = await write(client, "the first after")
            assert refused.is_error and kind(refused) == "state_damaged", refused.content
            for n in range(8):  # reopened: a fresh log, and every write after it is one a start sees
                data(await write(client, f"after {n}"))
                acknowledged.append(f"after {n}")
            kill(pid)
    except BaseException as exc:
        only_the_kill(exc)
    assert set(acknowledged) <= kept(database), "an acknowledged write was lost"
    assert "the first after" not in kept(database)
    assert integrity(database) == "ok"
    text = log.read_text()
    assert "state.db-wal (beside" in text and "deleted or replaced" in text and "copied" in text, text
    assert "Traceback" not in text
    async with server(workspace, data_dir, log) as (client, _):  # the next start serves as before
        data(await write(client, "after the restart"))
    assert "after the restart" in kept(database)


async def test_f2_a_backup_renamed_over_the_state_gets_the_old_log_moved_aside(workspace: Path, tmp_path: Path) -> None:
    data_dir, log = tmp_path / "data", tmp_path / "server.log"
    database = data_dir / "state.db"
    try:
        async with server(workspace, data_dir, log) as (client, pid):
            data(await write(client, "in the backup"))
            with closing(sqlite3.connect(database)) as live, closing(sqlite3.connect(tmp_path / "backup.db")) as copy:
                live.backup(copy)
            for n in range(20):  # the live log holds frames the backup never had
                data(await write(client, f"after the backup {n} " + "x" * 4000))
            os.replace(tmp_path / "backup.db", database)
            refused = await write(client, "into the replaced file")
            assert refused.is_error and kind(refused) == "state_gone", refused.content
            kill(pid)  # its log and index stay beside the backup
    except BaseException as exc:
        only_the_kill(exc)
    assert (data_dir / "state.db-wal").exists()
    async with server(workspace, data_dir, log) as (client, _):
        data(await write(client, "on the restored backup"))
    contents = kept(database)
    assert {"in the backup", "on the restored backup"} <= contents
    assert not any(content.startswith("after the backup") for content in contents)  # the foreign log was not replayed
    aside = sorted(p.name for p in data_dir.iterdir() if ".stale-" in p.name)
    assert [name.split(".stale-")[0] for name in aside] == ["state.db-shm", "state.db-wal"], aside
    text = log.read_text()
    assert "malformed" not in text and "Traceback" not in text, text
    assert "was replaced since a server last opened it" in text and "kept, not deleted" in text, text
    assert integrity(database) == "ok"


async def test_f4_an_index_deleted_then_a_second_server_gives_tool_errors_and_recovers(
    workspace: Path, tmp_path: Path
) -> None:
    data_dir, log = tmp_path / "data", tmp_path / "server.log"
    async with server(workspace, data_dir, log) as (first, _):
        for n in range(5):
            data(await write(first, f"first {n}"))
        (data_dir / "state.db-shm").unlink()
        async with server(workspace, data_dir, log) as (second, _):
            for n in range(5):
                data(await write(second, f"second {n}"))
            results = [await write(first, f"first again {n}") for n in range(3)]
            assert results[0].is_error and kind(results[0]) == "state_damaged", results[0].content  # no MCPError
            assert not any(result.is_error for result in results[1:]), [r.content for r in results]
            for n in range(5):
                data(await write(second, f"second again {n}"))
            seen = data(await second.call_tool("memory_read", {"target": "working_buffer"}))
    assert "second again 4" in str(seen)
    assert integrity(data_dir / "state.db") == "ok"
    assert {"first 4", "second 4", "first again 2", "second again 4"} <= kept(data_dir / "state.db")
    text = log.read_text()
    assert "state.db-shm (beside" in text and "reopened the state database" in text, text
    assert "Traceback" not in text
