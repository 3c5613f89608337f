"""The disk that holds the state fills up (a 4 MB tmpfs mounted as the data dir): every call is refused with one
clear tool error (each call is recorded before it runs) and runs again once space is freed; the WAL stays bounded;
start-up on a full disk is one line, and shutdown on one exits cleanly. Needs root to mount (CI runs as root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from conftest import Connect, data, error_text

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.publishing.publish import ERROR_META_KEY
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.db import Database
from managed_tools.stores.db.sqlite_file import WAL_SIZE_LIMIT
from managed_tools.stores.errors import DiskFullError

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
MOUNT_SIZE = "4m"


def mounted(source: list[str], skip_reason: str) -> Iterator[Path]:
    """`mount <source...> DIR` on a fresh directory, unmounted afterwards; the test is skipped, with `skip_reason`,
    where mounting is not permitted."""
    where = Path(tempfile.mkdtemp(prefix="managed-tools-disk-"))
    if subprocess.run(["mount", *source, str(where)], check=False, capture_output=True).returncode != 0:
        where.rmdir()
        pytest.skip(skip_reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 4 MB tmpfs of the test's own."""
    yield from mounted(["-t", "tmpfs", "-o", f"size={MOUNT_SIZE}", "tmpfs"], "cannot mount a tmpfs (needs root; CI is)")


def fill(disk: Path) -> Path:
    """Take every free byte of `disk`; returns the filler to remove."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (65536, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def kind(result: object) -> str:
    return str((getattr(result, "meta", None) or {}).get(ERROR_META_KEY, {}).get("kind"))


async def test_a_full_disk_is_one_clear_error_and_calls_run_once_space_is_freed(
    workspace: Path, small_disk: Path, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    (workspace / "notes.md").write_text("on another disk\n")
    config = ServeConfig.build(workspace=workspace, data_dir=small_disk / "data", database=None)
    async with open_runtime(config) as runtime, connect(runtime) as client:
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "before"}))
        filler = fill(small_disk)
        write = await client.call_tool("memory_write", {"target": "session_state", "content": "x" * 100_000})
        read = await client.call_tool("read", {"path": "notes.md"})
        for refused in (write, read):
            assert kind(refused) == "disk_full", refused.content
            assert "disk that holds the server's state is full" in error_text(refused)
            assert "Every call is recorded before it runs" in error_text(refused)
            assert str(small_disk) not in error_text(refused)  # a host path, for the log only
        filler.unlink()
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "after"}))
        assert "on another disk" in str(data(await client.call_tool("read", {"path": "notes.md"})))
    full = [r for r in caplog.records if "is full: every call is refused" in r.getMessage()]
    assert len(full) == 1 and str(small_disk) in full[0].getMessage()  # once, however many calls were refused
    assert "takes writes again" in caplog.text
    assert "Traceback" not in caplog.text


async def test_the_wal_stays_bounded(workspace: Path, small_disk: Path, connect: Connect) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=small_disk / "data", database=None)
    wal = small_disk / "data" / "state.db-wal"
    largest = 0
    async with open_runtime(config) as runtime, connect(runtime) as client:
        # About 1 MB of content and 3 MB of WAL: at SQLite's default checkpoint (4 MB of WAL) the disk would fill.
        for n in range(60):
            content = f"{n} " + os.urandom(8_000).hex()
            data(await client.call_tool("memory_write", {"target": "working_buffer", "content": content}))
            largest = max(largest, wal.stat().st_size if wal.exists() else 0)
    assert largest <= WAL_SIZE_LIMIT + 256 * 1024, largest


def serve(workspace: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
    args += ["--data-dir", str(data_dir)]
    return subprocess.run(args, check=False, input="", capture_output=True, text=True, timeout=60, env=dict(os.environ))


def test_start_up_on_a_full_disk_is_one_line(workspace: Path, small_disk: Path) -> None:
    fill(small_disk)
    started = serve(workspace, small_disk / "data")
    assert started.returncode == 2, started.stderr
    assert "Traceback" not in started.stderr
    assert "is full" in started.stderr and str(small_disk) in started.stderr
    assert len(started.stderr.strip().splitlines()) == 1, started.stderr


def test_shutdown_on_a_full_disk_exits_cleanly(workspace: Path, small_disk: Path) -> None:
    args = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
    args += ["--data-dir", str(small_disk / "data")]
    server = subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    assert server.stdin is not None and server.stdout is not None
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}) + "\n")
    server.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    call = {"name": "memory_write", "arguments": {"target": "session_state", "content": "x"}}
    server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}) + "\n")
    server.stdin.flush()
    answers = [json.loads(server.stdout.readline()) for _ in range(2)]
    assert answers[-1]["id"] == 2 and not answers[-1]["result"].get("isError"), answers
    fill(small_disk)
    server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call}) + "\n")
    server.stdin.flush()
    refused = json.loads(server.stdout.readline())
    assert refused["result"]["isError"] and "is full" in refused["result"]["content"][0]["text"]
    _, stderr = server.communicate(timeout=60)  # stdin closed: the server stops
    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "is full" in stderr


@pytest.fixture
def failing_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MB ext4 image mounted with errors=remount-ro, as a data dir's disk usually is: on an I/O error the
    kernel turns it read-only under the open files (a plain `mount -o remount,ro` is refused while a file is open
    for writing, so that is how a data dir turns read-only mid-run)."""
    image = tmp_path / "disk.img"
    with image.open("wb") as out:
        out.truncate(8 * 1024 * 1024)
    if subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=False, capture_output=True).returncode != 0:
        pytest.skip("mkfs.ext4 is missing (apt-get install e2fsprogs; CI has it)")
    yield from mounted(["-o", "loop,errors=remount-ro", str(image)], "cannot mount an ext4 image (needs root; CI is)")


def turn_read_only(mount: Path) -> None:
    """What the kernel does to an errors=remount-ro file system on an I/O error (ext4's own test switch)."""
    source = subprocess.run(["findmnt", "-no", "SOURCE", str(mount)], check=True, capture_output=True, text=True)
    Path(f"/sys/fs/ext4/{Path(source.stdout.strip()).name}/trigger_fs_error").write_text("managed-tools test\n")


async def test_a_data_dir_turned_read_only_is_one_clear_error(
    workspace: Path, failing_disk: Path, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=failing_disk / "data", database=None)
    async with open_runtime(config) as runtime, connect(runtime) as client:
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "before"}))
        turn_read_only(failing_disk)
        refused = await client.call_tool("memory_write", {"target": "session_state", "content": "during"})
        read = await client.call_tool("memory_read", {"target": "session_state"})
    for result in (refused, read):
        assert kind(result) == "state_read_only", result.content
        assert "turned read-only" in error_text(result) and "restart" in error_text(result)
    assert "turned read-only: every call is refused" in caplog.text
    assert "Traceback" not in caplog.text


async def test_records_sharing_a_commit_on_a_full_disk_each_fail_clearly(small_disk: Path) -> None:
    """Group commit: records written together fail together when the disk refuses their transaction, each with the
    clear error (not a traceback, not one caller's error raised in another), and succeed once space is freed."""
    db = await Database.open(small_disk / "data" / "state.db", local_dir=small_disk / "data")
    try:
        async with db.write() as tx:
            await tx.execute("CREATE TABLE notes (body TEXT)")
        filler = fill(small_disk)
        outcomes: list[BaseException | None] = []

        async def note() -> None:
            try:
                await db.record(lambda tx: tx.execute("INSERT INTO notes VALUES (?)", (os.urandom(50_000).hex(),)))
                outcomes.append(None)
            except DiskFullError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(note)
        assert len(outcomes) == 8 and all(isinstance(o, DiskFullError) for o in outcomes), outcomes
        assert len({id(o) for o in outcomes}) == 8 and "disk that holds the server's state is full" in str(outcomes[0])
        filler.unlink()
        await db.record(lambda tx: tx.execute("INSERT INTO notes VALUES ('after')"))
    finally:
        await db.close()
