"""The database on a real file and on a real PostgreSQL server: migrations across processes, savepoints, rollback
undo, ids; undoable writes."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from conftest import _psql
from support.postgres_server import binaries, database_url

from managed_tools.sandbox.files import replace_file
from managed_tools.sandbox.mounts import Mount
from managed_tools.sandbox.paths import PathGuard
from managed_tools.stores.db import Database
from managed_tools.stores.db.migrations import MIGRATIONS
from managed_tools.stores.db.postgres import WRITE_LOCK
from managed_tools.stores.ids import canonical_json, utc_now, uuid7

pytestmark = pytest.mark.anyio

OPEN_DB = "import anyio, sys, pathlib; from managed_tools.stores.db import Database\n" \
    "target = sys.argv[1] if '://' in sys.argv[1] else pathlib.Path(sys.argv[1])\n" \
    "async def main():\n    db = await Database.open(target, local_dir=pathlib.Path(sys.argv[2]))\n" \
    "    await db.close()\n" \
    "anyio.run(main)"  # fmt: skip


def test_uuid7_is_version_7_and_time_ordered() -> None:
    ids = [uuid7() for _ in range(50)]
    assert all(re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", i) for i in ids)
    assert [i[:13] for i in ids] == sorted(i[:13] for i in ids)  # the millisecond prefix never goes back
    assert len(set(ids)) == 50
    assert all(str(uuid.UUID(i)) == i for i in ids)  # spelled out by hand, the UUID's own canonical form


def test_uuid7_increases_strictly_within_a_millisecond_and_across_threads() -> None:
    """The regression: two memory versions written in one millisecond were listed in either order (ordered by
    created_at, then id, with random bits deciding), so the overview's diff of the newest version was sometimes
    the older one's."""
    ids = [uuid7() for _ in range(2000)]  # many share a millisecond
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    made: list[list[str]] = [[] for _ in range(4)]
    threads = [threading.Thread(target=lambda out=out: out.extend(uuid7() for _ in range(2000))) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for out in made for i in out]
    assert len(set(every)) == len(every) and all(out == sorted(out) for out in made)


def test_utc_now_is_iso_8601_with_milliseconds_and_z() -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    now = utc_now()
    after = datetime.now(UTC)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", now)
    assert before <= datetime.strptime(now, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC) <= after


def test_canonical_json_is_order_independent() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == canonical_json({"a": [1, {"c": 3, "d": 2}], "b": 1})


@pytest.mark.both_backends
def test_migrations_apply_once_when_processes_start_together(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    target: Path | str = tmp_path / "state.db"
    if backend == "postgresql":  # an empty database, not the migrated template
        server: str = request.getfixturevalue("postgres_server")
        name = f"empty_{uuid.uuid4().hex[:12]}"
        _psql(server, f"CREATE DATABASE {name} TEMPLATE template0")
        target = database_url(server, name)
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_DB, str(target), str(tmp_path)]) for _ in range(8)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 8

    async def versions() -> list[int]:
        db = await Database.open(target, local_dir=tmp_path)
        try:
            async with db.read() as tx:
                return [row[0] for row in await tx.fetchall("SELECT version FROM schema_migrations ORDER BY 1")]
        finally:
            await db.close()

    assert anyio.run(versions) == [m[0] for m in MIGRATIONS]


@pytest.mark.both_backends
async def test_savepoint_rolls_back_only_its_part(database: Path | str, tmp_path: Path) -> None:
    db = await Database.open(database, local_dir=tmp_path)
    try:
        async with db.write() as tx:
            await tx.execute("CREATE TABLE t (v TEXT)")
            await tx.execute("INSERT INTO t VALUES ('kept')")
            with pytest.raises(RuntimeError):
                async with tx.savepoint():
                    await tx.execute("INSERT INTO t VALUES ('dropped')")
                    raise RuntimeError("inner failure")
            async with tx.savepoint():
                await tx.execute("INSERT INTO t VALUES ('also kept')")
        with pytest.raises(RuntimeError):
            async with db.write() as tx:
                await tx.execute("INSERT INTO t VALUES ('outer dropped')")
                raise RuntimeError("outer failure")
        async with db.read() as tx:
            assert [r[0] for r in await tx.fetchall("SELECT v FROM t ORDER BY v")] == ["also kept", "kept"]
            if db.dialect.name == "sqlite":
                assert await tx.scalar("PRAGMA journal_mode") == "wal"
                assert await tx.scalar("PRAGMA foreign_keys") == 1
    finally:
        await db.close()


@pytest.mark.both_backends
async def test_readers_see_a_snapshot_while_a_writer_works(database: Path | str, tmp_path: Path) -> None:
    db = await Database.open(database, local_dir=tmp_path)
    try:
        async with db.write() as tx:
            await tx.execute("CREATE TABLE t (v INTEGER)")
        async with db.write() as tx:
            await tx.execute("INSERT INTO t VALUES (1)")
            async with db.read() as reader:
                assert await reader.scalar("SELECT COUNT(*) FROM t") == 0  # uncommitted work is invisible
        async with db.read() as reader:
            assert await reader.scalar("SELECT COUNT(*) FROM t") == 1
    finally:
        await db.close()


def _lock_is_free(database: Path | str) -> bool:
    """Whether another process could start writing now."""
    if isinstance(database, str):
        bin_dir = binaries()
        assert bin_dir is not None
        probe = f"SELECT pg_try_advisory_lock({WRITE_LOCK})"  # released when psql exits
        answer = subprocess.run(
            [str(bin_dir / "psql"), "-tAc", probe, database], check=True, capture_output=True, text=True
        )
        return answer.stdout.strip() == "t"
    other = sqlite3.connect(database, timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.rollback()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


@pytest.mark.both_backends
async def test_rollback_runs_undo_while_the_write_lock_is_held(database: Path | str, tmp_path: Path) -> None:
    db = await Database.open(database, local_dir=tmp_path)
    seen: list[str] = []

    def undo(label: str) -> None:  # another process trying to write in between
        seen.append(f"{label}: lock was free" if _lock_is_free(database) else f"{label}: still locked")

    try:
        async with db.write() as tx:
            tx.on_rollback(lambda: seen.append("committed work is never undone"))
        with pytest.raises(RuntimeError):
            async with db.write() as tx:
                tx.on_rollback(lambda: undo("outer"))
                with pytest.raises(ValueError):
                    async with tx.savepoint():
                        tx.on_rollback(lambda: undo("savepoint"))
                        raise ValueError("inner failure")
                raise RuntimeError("outer failure")
        async with db.read() as tx:
            with pytest.raises(RuntimeError, match="needs a write transaction"):
                tx.on_rollback(lambda: None)
    finally:
        await db.close()
    assert seen == ["savepoint: still locked", "outer: still locked"]  # each once, newest first


async def test_a_write_cancelled_while_it_waits_to_begin_leaves_no_transaction_open(tmp_path: Path) -> None:
    """Another process holds the write lock, so BEGIN IMMEDIATE waits in the database thread; the write is
    cancelled (a client closing stdin), then the lock is freed and the thread's BEGIN succeeds after all. The next
    write must still work: the begun transaction was rolled back (it once failed "cannot start a transaction within
    a transaction", and a stdio server exited 1 when its wake closed)."""
    path = tmp_path / "state.db"
    db = await Database.open(path, local_dir=tmp_path)
    other = sqlite3.connect(path, timeout=0, check_same_thread=False)
    try:
        async with db.write() as tx:
            await tx.execute("CREATE TABLE t (v INTEGER)")
        other.execute("BEGIN IMMEDIATE")
        with anyio.move_on_after(0.2) as waiting:
            async with db.write() as tx:
                await tx.execute("INSERT INTO t VALUES (1)")
        assert waiting.cancelled_caught
        other.rollback()  # the database thread's BEGIN, still retrying, now begins
        await anyio.sleep(0.3)
        async with db.write() as tx:
            await tx.execute("INSERT INTO t VALUES (2)")
        async with db.read() as reader:
            assert await reader.scalar("SELECT group_concat(v) FROM t") == "2"
    finally:
        other.close()
        await db.close()


def test_replace_file_undo_puts_back_what_was_there(tmp_path: Path) -> None:
    mount = Mount(
        kind="workspace", mount_path="/workspace", root=tmp_path, access="read_write", scope="user", prompt=""
    )
    guard = PathGuard([mount], [])
    existing = tmp_path / "kept.md"
    existing.write_bytes(b"old\n")
    existing.chmod(0o640)
    undo = replace_file(guard.resolve("kept.md", "write"), b"new\n", b"old\n")
    assert existing.read_bytes() == b"new\n"
    undo()
    assert existing.read_bytes() == b"old\n" and existing.stat().st_mode & 0o777 == 0o640

    fresh = tmp_path / "a" / "b" / "fresh.md"
    undo = replace_file(guard.resolve("a/b/fresh.md", "write"), b"x", None)
    assert fresh.read_bytes() == b"x"
    undo()
    assert not (tmp_path / "a").exists()  # the file and the directories made for it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.md"]  # no temporary files left behind
