"""The database on a real file: migrations across processes, savepoints, rollback undo, ids; undoable writes."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from managed_tools.stores.db import Database
from managed_tools.stores.files import replace_file
from managed_tools.stores.ids import canonical_json, uuid7
from managed_tools.stores.migrations import MIGRATIONS
from managed_tools.stores.mounts import Mount
from managed_tools.stores.paths import PathGuard

pytestmark = pytest.mark.anyio

OPEN_DB = "import anyio, sys; from managed_tools.stores.db import Database\n" \
    "async def main():\n    db = await Database.open(__import__('pathlib').Path(sys.argv[1]))\n    await db.close()\n" \
    "anyio.run(main)"  # fmt: skip


def test_uuid7_is_version_7_and_time_ordered() -> None:
    ids = [uuid7() for _ in range(50)]
    assert all(re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", i) for i in ids)
    assert [i[:13] for i in ids] == sorted(i[:13] for i in ids)  # the millisecond prefix never goes back
    assert len(set(ids)) == 50


def test_canonical_json_is_order_independent() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == canonical_json({"a": [1, {"c": 3, "d": 2}], "b": 1})


def test_migrations_apply_once_when_processes_start_together(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_DB, str(path)]) for _ in range(8)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 8

    async def versions() -> list[int]:
        db = await Database.open(path)
        try:
            async with db.read() as tx:
                return [row[0] for row in await tx.fetchall("SELECT version FROM schema_migrations ORDER BY 1")]
        finally:
            await db.close()

    assert anyio.run(versions) == [m[0] for m in MIGRATIONS]


async def test_savepoint_rolls_back_only_its_part(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "state.db")
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
            assert [r[0] for r in await tx.fetchall("SELECT v FROM t ORDER BY rowid")] == ["kept", "also kept"]
            assert await tx.scalar("PRAGMA journal_mode") == "wal"
            assert await tx.scalar("PRAGMA foreign_keys") == 1
    finally:
        await db.close()


async def test_readers_see_a_snapshot_while_a_writer_works(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "state.db")
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


async def test_rollback_runs_undo_while_the_write_lock_is_held(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "state.db")
    seen: list[str] = []

    def undo(label: str) -> None:
        other = sqlite3.connect(tmp_path / "state.db", timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process trying to write in between
            seen.append(f"{label}: lock was free")
            other.rollback()
        except sqlite3.OperationalError:
            seen.append(f"{label}: still locked")
        finally:
            other.close()

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
