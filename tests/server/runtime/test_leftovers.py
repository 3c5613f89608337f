"""What a killed server leaves behind goes at the next start: the temporary file of a write killed before its
rename (ours only, found from the records of the call that never completed, never by walking the workspace), and an
attachment file whose row never committed. Look-alike files of anyone else stay.

The kill is real: a `managed-tools serve` process over stdio, ended by `os._exit` inside the real atomic write,
between its temporary file and the rename (tests/support/crash_probe.py)."""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import sys
import time
from pathlib import Path

import anyio
import pytest
from conftest import Connect, data
from mcp import Client, StdioServerParameters

from managed_tools.sandbox.files import FRESH_SECONDS, Young, remove_stale_temps, temp_name
from managed_tools.sandbox.mounts import Mount
from managed_tools.sandbox.paths import PathGuard
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.ids import uuid7

pytestmark = pytest.mark.anyio
PROBE = str(Path(__file__).resolve().parents[2] / "support" / "crash_probe.py")


def temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


async def killed_during_a_write(workspace: Path, data_dir: Path, path: str) -> str:
    """Run the probe's write in a real server that dies inside it; the session id."""
    args = ["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--data-dir", str(data_dir)]
    params = StdioServerParameters(command=sys.executable, args=[*args, "--tools-module", PROBE], env=dict(os.environ))
    session_id = ""
    with anyio.fail_after(60):
        try:
            async with Client(params) as client:
                session_id = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
                await client.call_tool("probe_write_then_die", {"path": path, "content": "half"})
        except Exception:
            pass
    assert session_id
    return session_id


async def test_a_killed_write_leaves_no_temporary_file_and_an_orphan_attachment_goes(
    workspace: Path, tmp_path: Path, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    folder = workspace / "deep" / "er"
    folder.mkdir(parents=True)
    (folder / "notes.md").write_text("kept\n")
    session_id = await killed_during_a_write(workspace, data_dir, "/workspace/deep/er/notes.md")
    left = temps(folder)
    assert len(left) == 1, left  # what the kill left
    foreign = [".notes.md.0123456789ab.tmp", f".notes.md.{'ab' * 14}.tmp", ".other.tmp"]  # ours in form only
    for name in foreign:
        (folder / name).write_text("someone else's\n")
    orphan = data_dir / "attachments" / session_id / uuid7()
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"written, its row never committed")
    not_an_attachment = orphan.with_name("README")
    not_an_attachment.write_text("not ours to judge\n")
    os.utime(folder / left[0])  # written just now: a start-up right after the kill waits it out, never keeps it

    caplog.set_level(logging.INFO, "managed_tools.leftovers")
    config = ServeConfig.build(workspace=workspace, data_dir=data_dir, database=None)
    async with open_runtime(config) as runtime, connect(runtime) as client:
        read = data(await client.call_tool("read", {"path": "/workspace/deep/er/notes.md"}))
    assert "kept" in str(read)  # the killed write never landed
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp")) == sorted(foreign)
    assert not orphan.exists() and not_an_attachment.exists()
    assert "removed 1 temporary file(s) and 1 attachment file(s)" in caplog.text


async def test_a_failed_write_sweeps_what_earlier_kills_left_beside_it(
    workspace: Path, tmp_path: Path, connect: Connect
) -> None:
    data_dir = tmp_path / "data"
    session_id = await killed_during_a_write(workspace, data_dir, "/workspace/notes.md")
    assert temps(workspace)
    await anyio.sleep(FRESH_SECONDS + 0.2)
    # The killed wake closed, as if its records were lost, so that start-up finds nothing: only the failed write
    # can sweep.
    with sqlite3.connect(data_dir / "state.db") as state:
        state.execute("UPDATE wakes SET ended_at = 'x' WHERE session_id = ?", (session_id,))
    config = ServeConfig.build(workspace=workspace, data_dir=data_dir, database=None)
    async with open_runtime(config) as runtime, connect(runtime) as client:
        assert temps(workspace)  # start-up left it
        (workspace / "notes.md").mkdir()  # a directory where the file goes: the write fails
        failed = await client.call_tool("write", {"path": "/workspace/notes.md", "content": "x"})
    assert failed.is_error
    assert not temps(workspace)


@pytest.mark.parametrize(("young", "kept"), [("spare", True), ("wait", False), ("remove", False)])
def test_a_young_temporary_is_spared_waited_out_or_removed_and_a_held_one_always_stays(
    workspace: Path, young: Young, kept: bool
) -> None:
    """A file killed an instant ago: the failed write's sweep spares it, start-up's waits it out, substrate healing
    (under the write lock) removes it at once. A file a live writer holds (its flock) stays whatever the mode."""
    mount = Mount(
        kind="workspace", mount_path="/workspace", root=workspace, access="read_write", scope="user", prompt=""
    )
    target = PathGuard([mount], []).resolve("/workspace/notes.md", "write")
    dead, live = workspace / temp_name("notes.md"), workspace / temp_name("notes.md")
    dead.write_text("half")
    live.write_text("being written")
    with live.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        started = time.monotonic()
        assert remove_stale_temps(target, young=young) == (0 if kept else 1)
        waited = time.monotonic() - started
    assert dead.exists() == kept and live.exists()
    assert (waited >= FRESH_SECONDS) == (young == "wait")
