"""The async SQLite database, the embedded default: one writer connection, a pool of readers, migrations at start.

Several server processes share one file (every stdio client spawns its own process), so every write runs
in `BEGIN IMMEDIATE`: SQLite's own lock serialises writers across processes, the busy timeout makes a
writer wait for another process instead of failing at once, and WAL lets readers see a consistent
snapshot while a writer works.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TypeVar

import aiosqlite
import anyio

from managed_tools.stores.db import LOCKED, Database, Params, Row, Synchronous, Tx
from managed_tools.stores.db.dialect import SQLITE
from managed_tools.stores.db.migrations import MIGRATIONS, statements
from managed_tools.stores.db.wal_check import read_wal, report_recovery
from managed_tools.stores.errors import (
    DatabaseBusyError,
    DatabaseGoneError,
    DatabaseOpenError,
    DatabaseReadOnlyError,
    DatabaseUnwritableError,
    DiskFullError,
)

log = logging.getLogger(__name__)
GONE = (
    "The server's state file was deleted or replaced while it ran, so nothing more is written to it (it would be "
    "lost at the next start). Ask the person running the server to restart it; `managed-tools where` shows the file."
)

# aiosqlite's DEBUG lines print every statement with its parameters (memory contents, event payloads, vault
# ciphertexts): a person's data and, before redaction existed for them, secrets. `--log-level debug` is for our
# own lines; aiosqlite says only what goes wrong (INFO and above).
logging.getLogger("aiosqlite").setLevel(logging.INFO)


WAL_CHECKPOINT_PAGES = 256  # 1 MB at SQLite's 4 KB pages
WAL_SIZE_LIMIT = 2 * 1024 * 1024
FULL = (
    "The disk that holds the server's state is full, so nothing was written. Every call is recorded before it "
    "runs, so no call can run until space is freed there: ask the person running the server (`managed-tools where` "
    "shows the data dir)."
)
READ_ONLY = (
    "The file system that holds the server's state turned read-only while the server ran, so nothing was written, "
    "and no call can run (each is recorded before it runs). Ask the person running the server to make it writable "
    "and restart the server (`managed-tools where` shows the data dir)."
)


def _refusal(exc: BaseException, path: Path, locked: str = LOCKED) -> DatabaseUnwritableError | None:
    """The clear error for a write that the disk or the file of the state at `path` refused, if `exc` is one."""
    code = getattr(exc, "sqlite_errorname", "")
    number = exc.errno if isinstance(exc, OSError) else None
    if code == "SQLITE_FULL" or number == errno.ENOSPC:
        return DiskFullError(FULL)
    if (
        code.startswith("SQLITE_READONLY")
        or number == errno.EROFS
        or (code.startswith("SQLITE_IOERR") and _read_only(path))
    ):
        return DatabaseReadOnlyError(READ_ONLY)
    text = str(exc).lower() if isinstance(exc, sqlite3.OperationalError) else ""
    if "locked" in text or "busy" in text:
        return DatabaseBusyError(locked)
    return None


def _read_only(path: Path) -> bool:
    """Has the file system of `path` turned read-only? SQLite reports a write that the kernel refused with EROFS
    only as an I/O error, and a file system that turned read-only on an error (ext4's errors=remount-ro) may not
    say so in its mount flags: so try what SQLite tried, creating an unnamed file beside it (on this error path
    only)."""
    try:
        with tempfile.TemporaryFile(dir=path.parent):
            return False
    except OSError as exc:
        return exc.errno == errno.EROFS


@contextmanager
def _refused_clearly(path: Path, locked: str = LOCKED) -> Iterator[None]:
    """SQLite's "database is locked" after the busy timeout, a full disk and a read-only file system become
    errors a person can act on."""
    try:
        yield
    except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as exc:
        clear = _refusal(exc, path, locked)
        if clear is None:
            raise
        raise clear from exc


T = TypeVar("T")


async def _again_if_stale(run: Callable[[], Awaitable[T]]) -> T:
    """SQLite 3.40 (Debian 12's) fails the first write into `events` after another connection changed the schema
    (a migration in another process, a test's table) with "no such table: events": compiling the FTS trigger on
    a stale schema. The statement did nothing; once more, on the reloaded schema, it succeeds."""
    try:
        return await run()
    except sqlite3.OperationalError as exc:
        if not str(exc).startswith("no such table: "):
            raise
        return await run()


class SqliteTx(Tx):
    dialect = SQLITE

    def __init__(self, conn: aiosqlite.Connection, path: Path, *, writing: bool = False) -> None:
        super().__init__(writing=writing)
        self._conn = conn
        self._path = path

    async def execute(self, sql: str, params: Params = ()) -> int:
        with _refused_clearly(self._path):
            cursor = await _again_if_stale(lambda: self._conn.execute(sql, params))
        count = cursor.rowcount
        await cursor.close()
        return count

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        with _refused_clearly(self._path):
            await self._conn.executemany(sql, rows)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        # One hop to the database thread: every extra hop costs tens of microseconds per call.
        with _refused_clearly(self._path):
            return list(await _again_if_stale(lambda: self._conn.execute_fetchall(sql, params)))

    async def _statement(self, sql: str) -> None:
        with _refused_clearly(self._path):
            await self._conn.execute(sql)


class SqliteDatabase(Database):
    """The state file (WAL): one writer connection, one appender, a small pool of readers."""

    dialect = SQLITE

    def __init__(
        self,
        path: Path,
        writer: aiosqlite.Connection,
        appender: aiosqlite.Connection,
        readers: list[aiosqlite.Connection],
    ) -> None:
        self.path = path
        self.local_dir = path.parent
        self.key = str(path)
        self._identity = _identity(path)
        self._writer = writer
        self._appender = appender
        self._write_lock = anyio.Lock()
        self._refused: str | None = None  # the kind of the refusals under way (disk full, read-only), once logged
        self._readers = readers
        self._reader_send, self._reader_recv = anyio.create_memory_object_stream[aiosqlite.Connection](len(readers))
        for conn in readers:
            self._reader_send.send_nowait(conn)

    @classmethod
    async def connect(
        cls, path: Path, *, busy_timeout_ms: int, readers: int, synchronous: Synchronous
    ) -> SqliteDatabase:
        """Raises DatabaseOpenError, naming the file and what to do, when it cannot be used; a failed open closes
        every connection it made, so no database thread outlives it (they would keep the process alive)."""
        opened: list[aiosqlite.Connection] = []
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _refuse_unusable_file(path)
            wal = read_wal(path)  # before any connection recovers it
            opened.append(await _connect(path, busy_timeout_ms, synchronous))
            await report_recovery(opened[0], path, wal)
            await _prepare(opened[0], busy_timeout_ms)
            for _ in range(1 + max(1, readers)):  # the appender, then the readers
                opened.append(await _connect(path, busy_timeout_ms, "NORMAL"))
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                for conn in opened:
                    await conn.close()
            if isinstance(exc, sqlite3.Error | OSError):
                raise DatabaseOpenError(_unusable(path, exc)) from exc
            raise
        return cls(path, opened[0], opened[1], opened[2:])

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            for conn in [self._writer, self._appender, *self._readers]:
                await conn.close()
            self._reader_send.close()
            self._reader_recv.close()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Tx]:
        """A write transaction (`BEGIN IMMEDIATE`), committed when the body returns, rolled back if it raises."""
        async with self._write_lock, self._said_when_refused():
            self._refuse_if_gone()
            with _refused_clearly(self.path):
                await self._writer.execute("BEGIN IMMEDIATE")
            tx = SqliteTx(self._writer, self.path, writing=True)
            try:
                yield tx
            except BaseException:
                with anyio.CancelScope(shield=True):
                    tx._run_undo()
                    await self._writer.rollback()
                raise
            else:
                stayed_locked = "The state database stayed locked by another process; nothing was written."
                with anyio.CancelScope(shield=True), _refused_clearly(self.path, stayed_locked):
                    try:
                        await self._writer.commit()
                    except sqlite3.OperationalError:
                        # A failed COMMIT keeps the transaction, and its lock, until this rollback.
                        tx._run_undo()
                        await self._writer.rollback()
                        raise
                tx._committed()

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[Tx]:
        """The writer outside any transaction: each statement commits on its own, atomically.

        For single-statement writes (an event append), which then cost one hop instead of three. Its own
        connection, at `synchronous=NORMAL`: an append survives a killed process but may be lost with the last
        few commits if the machine loses power, while `write()` commits at FULL (docs/decisions/crash-safety.md).
        """
        async with self._write_lock, self._said_when_refused():
            self._refuse_if_gone()
            with _refused_clearly(self.path):
                yield SqliteTx(self._appender, self.path)

    @asynccontextmanager
    async def _said_when_refused(self) -> AsyncIterator[None]:
        """A full or read-only disk in the log once when writes start failing, and once when they succeed again
        (not once per call: every call is refused meanwhile)."""
        try:
            yield
        except (DiskFullError, DatabaseReadOnlyError) as exc:
            if self._refused is None:
                what = "is full" if isinstance(exc, DiskFullError) else "turned read-only"
                log.error(
                    "the file system holding the state database %s %s: every call is refused until it takes writes "
                    "again",
                    self.path,
                    what,
                )
                self._refused = exc.kind
            raise
        if self._refused is not None:
            log.warning("the state database %s takes writes again; calls run as before", self.path)
            self._refused = None

    def _refuse_if_gone(self) -> None:
        """A state file deleted or replaced under the running server would take writes no later start sees: the
        connections keep the old inode. Checked before every write (one stat, a microsecond or two)."""
        if _identity(self.path) != self._identity:
            log.error(
                "the state database %s was deleted or replaced while the server ran; restart the server", self.path
            )
            raise DatabaseGoneError(GONE)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """A read-only snapshot on a pooled connection, so reads never wait for this process's writer."""
        conn = await self._reader_recv.receive()
        try:
            await conn.execute("BEGIN")
            try:
                yield SqliteTx(conn, self.path)
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.rollback()
        finally:
            self._reader_send.send_nowait(conn)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _refuse_unusable_file(path: Path) -> None:
    """A directory where the file should be, or a file SQLite would open read-only without a word (the first
    write would fail much later)."""
    if path.exists() and not path.is_file():
        raise DatabaseOpenError(f"The state database {path} is not a file: move it aside, or choose another data dir.")
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if file.exists() and not os.access(file, os.W_OK):
            raise DatabaseOpenError(
                f"The state database file {file} is read-only: the server writes to it; make it writable, "
                "or choose another data dir."
            )


async def _connect(path: Path, busy_timeout_ms: int, synchronous: Synchronous) -> aiosqlite.Connection:
    conn = aiosqlite.connect(str(path), isolation_level=None)
    try:
        await conn
    except BaseException:
        # aiosqlite stops its thread after a failed connect without waiting for it; wait here (it only closes
        # nothing), or it may outlive the event loop and report the closed loop on stderr.
        conn._thread.join(timeout=5)
        raise
    try:
        conn.row_factory = sqlite3.Row
        await conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        await conn.execute("PRAGMA foreign_keys=ON")
        await conn.execute(f"PRAGMA synchronous={synchronous}")
        # The WAL bounded: checkpointed each WAL_CHECKPOINT_PAGES (SQLite's default is about 4 MB, a mount's worth
        # on a small disk), and cut back to WAL_SIZE_LIMIT when it restarts, or it keeps its largest size for good.
        await conn.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
        await conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    except BaseException:
        with anyio.CancelScope(shield=True):
            await conn.close()
        raise
    return conn


def _unusable(path: Path, exc: sqlite3.Error | OSError) -> str:
    """Why the state file cannot be used and what to do, in one sentence for the person who started the server
    (never shown to a model: it names host paths)."""
    if isinstance(exc, FileExistsError):
        return f"The data dir {path.parent} is a file, not a directory; choose another data dir."
    code = getattr(exc, "sqlite_errorname", "")
    if code == "SQLITE_FULL" or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        return (
            f"The disk holding the state database {path} is full: free space on it (`df {path.parent}`), or "
            "choose another data dir."
        )
    if isinstance(exc, OSError):
        return f"Cannot create the data dir {path.parent}: {exc.strerror or exc}; choose another data dir."
    if code.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")):
        return (
            f"The state database {path} is not a usable SQLite database ({exc}: corrupt, cut short, or another "
            "kind of file): move it aside to start afresh, or choose another data dir."
        )
    if code.startswith(("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH")):
        return (
            f"The state database {path} is read-only ({exc}): the server writes to it and to its directory; "
            "make both writable, or choose another data dir."
        )
    if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return f"The state database {path} stayed locked by another process; try again in a moment."
    if code.startswith("SQLITE_CANTOPEN"):
        return (
            f"Cannot open or create the state database {path} ({exc}): its directory must be a writable "
            "directory; choose another data dir."
        )
    return f"Cannot use the state database {path} ({exc}): check it and its directory, or choose another data dir."


async def _prepare(conn: aiosqlite.Connection, busy_timeout_ms: int) -> None:
    """Switch to WAL and migrate, retrying while other processes do the same.

    On a fresh file two processes can meet where SQLite answers "locked" at once instead of waiting (switching
    the journal mode, or two readers both upgrading to writers), so the busy timeout alone is not enough here.
    """
    deadline = anyio.current_time() + max(busy_timeout_ms / 1000, 1.0) * 3
    while True:
        try:
            rows = await conn.execute_fetchall("PRAGMA journal_mode")
            if str(next(iter(rows))[0]).lower() != "wal":
                await conn.execute("PRAGMA journal_mode=WAL")
            await _migrate(conn)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or anyio.current_time() > deadline:
                raise
            await anyio.sleep(0.02 + secrets.randbelow(80) / 1000)


async def _migrate(conn: aiosqlite.Connection) -> None:
    """Apply the numbered migrations not yet recorded, each in its own IMMEDIATE transaction.

    The version is read inside the transaction, so two processes starting at once never apply one twice.
    """
    for migration in MIGRATIONS:
        version, name = migration[0], migration[1]
        await conn.execute("BEGIN IMMEDIATE")
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))"
            )
            cursor = await conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,))
            done = await cursor.fetchone()
            await cursor.close()
            if done is None:
                for statement in statements(migration, "sqlite"):
                    await conn.execute(statement)
                await conn.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (version, name))
        except BaseException:
            await conn.rollback()
            raise
        await conn.commit()
