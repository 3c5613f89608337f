"""The state file deleted or replaced under a running server: writes are refused with one clear error, so no write
is acknowledged into a file that the next start would not open."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import anyio
import pytest
from conftest import Connect, data, error_text
from test_permissions import answer

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.db.sqlite import SqliteDatabase

pytestmark = pytest.mark.anyio


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _replace(path: Path) -> None:
    other = path.with_name("other.db")
    sqlite3.connect(other).close()
    os.replace(other, path)


@pytest.mark.parametrize("change", [_remove, _replace], ids=["deleted", "replaced"])
async def test_a_state_file_gone_under_the_server_refuses_writes(
    config: ServeConfig, connect: Connect, change: object, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_runtime(config) as runtime, connect(runtime) as client:
        assert isinstance(runtime.db, SqliteDatabase)
        path = runtime.db.path
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "before"}))
        assert callable(change)
        change(path)
        refused = await client.call_tool("memory_write", {"target": "session_state", "content": "after"})
        described = await client.call_tool("environment_describe", {})
    text = error_text(refused)
    assert "state file was deleted or replaced" in text and "restart" in text
    assert str(path) not in text  # a host path is for the person, in the log
    assert "state file was deleted or replaced" in error_text(described)  # no call runs without its record
    assert str(path) in caplog.text
    async with open_runtime(config) as runtime, connect(runtime) as client:
        state = data(await client.call_tool("memory_read", {"target": "session_state"}))
    assert "after" not in str(state)  # nothing was acknowledged that a start cannot see


async def test_a_command_whose_end_cannot_be_recorded_is_not_reported_completed(
    config: ServeConfig, connect: Connect, workspace: Path
) -> None:
    """The command runs, then the state database refuses the record of its end (here: the file is deleted under
    the server; on PostgreSQL: a restart). The call says it ran and was not recorded, never `completed`."""
    command = "while [ ! -e go ]; do sleep 0.05; done; echo ran"
    async with (
        open_runtime(config) as runtime,
        connect(runtime, elicitation_callback=answer("accept", {"approve": True})) as client,
    ):
        assert isinstance(runtime.db, SqliteDatabase)
        path = runtime.db.path

        async def meanwhile() -> None:
            while not (workspace / "running").exists():  # noqa: ASYNC110 (a file the command makes; no event to wait on)
                await anyio.sleep(0.05)
            _remove(path)
            (workspace / "go").touch()

        async with anyio.create_task_group() as tg:
            tg.start_soon(meanwhile)
            with anyio.fail_after(30):
                result = await client.call_tool("shell_run", {"command": f"touch running; {command}", "waitMs": 30_000})
    text = error_text(result)
    assert "ran (completed, exit code 0) but its end could not be recorded" in text and "ran\n" in text
