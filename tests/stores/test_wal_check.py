"""A damaged write-ahead log at start-up: SQLite drops every frame from the damage on, acknowledged commits
included; the server says in its start-up log how many committed transactions were kept and how many were lost.

The state files are copied while the server runs, exactly as a crash would leave them (a WAL not yet checkpointed),
then one frame of the copy's WAL is damaged and a server starts on it."""

from __future__ import annotations

import logging
import re
import shutil
import struct
from pathlib import Path

import pytest
from conftest import Connect, data

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.db.wal_check import FRAME_HEADER, HEADER, read_wal

pytestmark = pytest.mark.anyio
WRITES = 3  # few enough that no checkpoint restarts the WAL meanwhile (checked below)


async def crashed_copy(workspace: Path, tmp_path: Path, connect: Connect) -> tuple[ServeConfig, str]:
    """A data dir holding the state files of a server that acknowledged WRITES memory writes and then died."""
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "running", database=None)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    async with open_runtime(config):
        pass  # the migrations, checkpointed at the close: the WAL of the run below holds only its own writes
    async with open_runtime(config) as runtime, connect(runtime) as client:
        session_id = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        for n in range(WRITES):
            data(await client.call_tool("memory_write", {"target": "session_state", "content": f"write {n}"}))
        for name in ("state.db", "state.db-wal"):
            shutil.copy(config.data_dir / name, crashed / name)
    frames = read_wal(crashed / "state.db")
    assert frames is not None
    with (crashed / "state.db-wal").open("rb") as wal:
        page_size = struct.unpack(">I", wal.read(12)[8:])[0]
    assert HEADER + frames.frames * (FRAME_HEADER + page_size) == frames.size, "the WAL restarted: fewer WRITES"
    return ServeConfig.build(workspace=workspace, data_dir=crashed, database=None), session_id


def figures(text: str) -> tuple[int, int]:
    found = re.search(r"kept (\d+) committed transaction\(s\) and dropped \d+ frame\(s\).*?, (\d+) committed", text)
    assert found, text
    return int(found[1]), int(found[2])


async def test_a_damaged_wal_is_said_with_what_was_kept_and_lost(
    workspace: Path, tmp_path: Path, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    config, session_id = await crashed_copy(workspace, tmp_path, connect)
    state = config.data_dir / "state.db"
    frames = read_wal(state)
    assert frames is not None and frames.frames > 0
    # Inside the writes, after the session was made: the frame after the commit 2 x WRITES commits from the end
    # (each write is its call's record and its transaction; a notice may follow).
    commits = [n for n, commit in enumerate(frames.commits) if commit]
    damaged = commits[-2 * WRITES - 1] + 1
    with (config.data_dir / "state.db-wal").open("r+b") as wal:
        page_size = struct.unpack(">I", wal.read(12)[8:])[0]
        wal.seek(HEADER + damaged * (FRAME_HEADER + page_size) + FRAME_HEADER + 100)
        byte = wal.read(1)
        wal.seek(-1, 1)
        wal.write(bytes([byte[0] ^ 0xFF]))

    caplog.set_level(logging.INFO, "managed_tools.db")
    async with open_runtime(config) as runtime, connect(runtime, session_id=session_id) as client:
        read = data(await client.call_tool("memory_read", {"target": "session_state"}))
    kept, lost = figures(caplog.text)
    assert kept + lost == sum(frames.commits) and lost > 0 and kept > 0
    assert str(state) in caplog.text  # for the person running the server
    assert f"write {WRITES - 1}" not in str(read)  # the last acknowledged write really was lost, as said


async def test_a_whole_wal_is_said_recovered(
    workspace: Path, tmp_path: Path, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    config, session_id = await crashed_copy(workspace, tmp_path, connect)
    frames = read_wal(config.data_dir / "state.db")
    assert frames is not None
    caplog.set_level(logging.INFO, "managed_tools.db")
    async with open_runtime(config) as runtime, connect(runtime, session_id=session_id) as client:
        read = data(await client.call_tool("memory_read", {"target": "session_state"}))
    assert f"recovered {sum(frames.commits)} committed transaction(s)" in caplog.text
    assert "all of it" in caplog.text and "damaged" not in caplog.text
    assert f"write {WRITES - 1}" in str(read)


async def test_an_unreadable_wal_header_is_said(
    workspace: Path, tmp_path: Path, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    config, session_id = await crashed_copy(workspace, tmp_path, connect)
    wal = config.data_dir / "state.db-wal"
    wal.write_bytes(b"\x00" * 8 + wal.read_bytes()[8:])
    async with open_runtime(config) as runtime, runtime.db.read() as tx:
        # Read in the store: the session itself may have been only in the log too (where the last checkpoint
        # fell depends on how many pages the migrations wrote).
        kept = await tx.scalar("SELECT count(*) FROM memory_versions WHERE session_id = ?", (session_id,))
    assert "has a header SQLite cannot read" in caplog.text
    assert kept == 0  # every write was only in the log SQLite ignored, as said
