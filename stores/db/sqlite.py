"""The async SQLite database, the embedded default: one writer connection, a pool of readers, migrations at start.

Several server processes share one file (every stdio client spawns its own process), so every write runs
in `BEGIN IMMEDIATE`: SQLite's own lock serialises writers across processes, the busy timeout makes a
writer wait for another process instead of failing at once, and WAL lets readers see a consistent
snapshot while a writer works.
"""

from __future__ import annotations

import copy
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite
import anyio
import anyio.lowlevel
import anyio.to_thread

from managed_tools.stores.db import LOCKED, Database, Params, Row, Synchronous, Tx
from managed_tools.stores.db.dialect import SQLITE
from managed_tools.stores.db.sqlite_file import (
    connect,
    identity,
    prepare,
    refuse_unusable_file,
    refused_clearly,
    unusable,
)
from managed_tools.stores.db.wal_check import read_wal, report_recovery
from managed_tools.stores.errors import (
    DatabaseBusyError,
    DatabaseGoneError,
    DatabaseOpenError,
    DatabaseReadOnlyError,
    DiskFullError,
)

log = logging.getLogger(__name__)
# aiosqlite's DEBUG lines name every function it runs; ours carry no parameters, but a statement's never belong in
# a log (docs/decisions/redact-every-resolved-secret.md).
logging.getLogger("aiosqlite").setLevel(logging.INFO)
GONE = (
    "The server's state file was deleted or replaced while it ran, so nothing more is written to it (it would be "
    "lost at the next start). Ask the person running the server to restart it; `managed-tools where` shows the file."
)

WAL_CHECKPOINT_PAGES = 256  # 1 MB at SQLite's 4 KB pages
# What a commit adds to the WAL, about, counted towards the next checkpoint (`_wrote`): a call's record (its events,
# their indexes, the session's and its usage's rows; fewer each when records share a commit), a write transaction
# (a memory version and its search index, the call's completion: more, and it varies).
RECORD_PAGES = 12
WRITE_PAGES = 24
BEGIN_SLICE_MS = 100


T = TypeVar("T")


def _again_if_stale(run: Callable[[], T]) -> T:
    """SQLite 3.40 (Debian 12's) fails the first write into `events` after another connection changed the schema
    (a migration in another process, a test's table) with "no such table: events": compiling a trigger on a stale
    schema. The statement did nothing; once more, on the reloaded schema, it succeeds."""
    try:
        return run()
    except sqlite3.OperationalError as exc:
        if not str(exc).startswith("no such table: "):
            raise
        return run()


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _try_begin(conn: sqlite3.Connection, wait_ms: int = 0) -> bool:
    """`BEGIN IMMEDIATE`, waiting at most `wait_ms` for another process's lock; False if it is still held."""
    if wait_ms:
        conn.execute(f"PRAGMA busy_timeout={wait_ms}")
    try:
        conn.execute("BEGIN IMMEDIATE")
        return True
    except sqlite3.OperationalError as exc:
        if not _busy(exc):
            raise
        return False
    finally:
        if wait_ms:
            conn.execute("PRAGMA busy_timeout=0")


def drive(work: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that awaits only statements of an `SqliteTx` (which never suspend) to its end, here, on
    this thread: so a store's async code runs whole as one function on the database thread."""
    try:
        work.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    work.close()
    raise RuntimeError("a unit of work on the database thread awaited something other than its own statements")


class SqliteTx(Tx):
    """Statements run at once, on the calling thread: SQLite answers a bounded query in microseconds, less than a
    hop to another thread and back costs (docs/decisions/one-round-trip-per-call.md). Nothing here ever waits
    for another process's lock: the writer's `BEGIN IMMEDIATE` and every commit are the database's to run."""

    dialect = SQLITE

    def __init__(
        self, conn: sqlite3.Connection | None, path: Path, *, writing: bool = False, hints: dict[str, int] | None = None
    ) -> None:
        super().__init__(writing=writing, hints=hints)
        self._conn = conn
        self._path = path

    def _connection(self) -> sqlite3.Connection:
        assert self._conn is not None, "a transaction used after it ended"
        return self._conn

    async def execute(self, sql: str, params: Params = ()) -> int:
        conn = self._connection()
        with refused_clearly(self._path):
            cursor = _again_if_stale(lambda: conn.execute(sql, params))
        count = cursor.rowcount
        cursor.close()
        return count

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        conn = self._connection()
        with refused_clearly(self._path):
            conn.executemany(sql, rows)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        conn = self._connection()
        with refused_clearly(self._path):
            return list(_again_if_stale(lambda: conn.execute(sql, params).fetchall()))

    async def _statement(self, sql: str) -> None:
        with refused_clearly(self._path):
            self._connection().execute(sql)


class _Snapshot(SqliteTx):
    """A read transaction that takes a pooled connection and begins only at its first statement: a call that
    reads nothing (a refusal, a tool with nothing to look up) never touches the database for it."""

    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(None, db.path)
        self._db = db
        self._ended = False

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            assert not self._ended, "a read transaction used after it ended"
            self._conn = self._db._take_reader()
            self._conn.execute("BEGIN")
        return self._conn

    def end(self) -> None:
        self._ended = True
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.rollback()
            finally:
                self._db._give_back(conn)


@dataclass(eq=False)
class _Queued:
    """One `record()` waiting for its transaction: its work, then what came of it."""

    work: Callable[[Tx], Coroutine[Any, Any, Any]]
    taken: bool = False  # in a transaction under way: it runs whole
    done: bool = False
    value: Any = None
    error: BaseException | None = None
    _woken: anyio.Event | None = None

    async def wait(self) -> None:
        """Until it is written, or its caller is to lead the next transaction."""
        self._woken = anyio.Event()
        await self._woken.wait()

    def wake(self) -> None:
        if self._woken is not None:
            self._woken.set()

    def finish(self) -> None:
        self.done = True
        self.wake()


class SqliteDatabase(Database):
    """The state file (WAL): one writer and one appender connection, and reader connections, each used on the
    event loop's thread except for what may wait (another process's lock, a commit's fsync, a checkpoint, the
    start-up), which runs on the database's one thread of its own: aiosqlite's, the writer's
    (docs/decisions/aiosqlite-for-the-database-thread.md)."""

    dialect = SQLITE

    def __init__(
        self,
        path: Path,
        *,
        thread: aiosqlite.Connection,
        appender: sqlite3.Connection,
        readers: list[sqlite3.Connection],
        busy_timeout_ms: int,
    ) -> None:
        self.path = path
        self.local_dir = path.parent
        self.key = str(path)
        self._identity = identity(path)
        self._thread = thread  # its worker runs one step at a time, in order
        self._writer = thread._conn
        self._appender = appender
        self._pages = 0  # WAL pages written since the last checkpoint, about (`_wrote`)
        self._queue: list[_Queued] = []  # records waiting for their transaction (`record`)
        self._leading = False  # a record is gathering the queue into its transaction
        self._hints: dict[str, int] = {}  # shared by the write transactions (Tx.hints)
        self._busy_timeout_ms = busy_timeout_ms
        self._write_lock = anyio.Lock(fast_acquire=True)  # taken at once when free: no trip round the loop
        self._refused: str | None = None  # the kind of the refusals under way (disk full, read-only), once logged
        self._idle_readers = readers
        self._keep_readers = len(readers)
        self._closed = False

    @classmethod
    async def connect(
        cls, path: Path, *, busy_timeout_ms: int, readers: int, synchronous: Synchronous
    ) -> SqliteDatabase:
        """Raises DatabaseOpenError, naming the file and what to do, when it cannot be used; a failed open closes
        every connection it made."""
        opened: list[sqlite3.Connection] = []

        def opening() -> sqlite3.Connection:
            """On the database thread, aiosqlite's connector: the writer, with the appender and the readers made
            on the way (used on the loop's thread: `connect` makes every connection `check_same_thread=False`)."""
            path.parent.mkdir(parents=True, exist_ok=True)
            refuse_unusable_file(path)
            wal = read_wal(path)  # before any connection recovers it
            opened.append(connect(path, busy_timeout_ms, synchronous))
            report_recovery(opened[0], path, wal)
            prepare(opened[0], busy_timeout_ms)
            for _ in range(1 + max(1, readers)):  # the appender, then the readers
                opened.append(connect(path, busy_timeout_ms, "NORMAL"))
            # The writer and the appender begin on the loop's thread and must never wait there: a lock another
            # process holds sends their `BEGIN IMMEDIATE` to the database thread, which waits with the busy timeout.
            for conn in opened[:2]:
                conn.execute("PRAGMA busy_timeout=0")
            return opened[0]

        thread = aiosqlite.Connection(opening, iter_chunk_size=64)
        try:
            await thread
        except BaseException as exc:
            # aiosqlite stops its thread after a failed (or cancelled) connect but does not wait for it: a thread
            # outliving the event loop prints "Event loop is closed" (docs/decisions/start-up-failures.md). Once it
            # ended, nothing opens a connection any more.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(thread._thread.join)
            for conn in opened:
                conn.close()
            if isinstance(exc, sqlite3.Error | OSError):
                raise DatabaseOpenError(unusable(path, exc)) from exc
            raise
        return cls(path, thread=thread, appender=opened[1], readers=opened[2:], busy_timeout_ms=busy_timeout_ms)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._write_lock:  # a commit under way on the database thread finishes first
                self._closed = True
                for conn in [self._appender, *self._idle_readers]:
                    conn.close()
                self._idle_readers.clear()
                await self._thread.close()  # the writer, on its thread, which then ends

    async def _on_thread(self, step: Callable[[], T]) -> T:
        """`step` on the database thread: one round trip. Not abandoned when cancelled (a commit runs whole, a
        `BEGIN` is known to have begun or not before its caller rolls back)."""
        # `_execute` is the queue every aiosqlite method goes through (untyped): a function run on its thread.
        execute = cast(Callable[[Callable[[], T]], Awaitable[T]], self._thread._execute)
        with anyio.CancelScope(shield=True):
            done = await execute(step)
        return done

    def _take_reader(self) -> sqlite3.Connection:
        if self._idle_readers:
            return self._idle_readers.pop()
        # More snapshots open at once than connections kept: one more for this one (closed when given back).
        return connect(self.path, self._busy_timeout_ms, "NORMAL")

    def _give_back(self, conn: sqlite3.Connection) -> None:
        if self._closed or len(self._idle_readers) >= self._keep_readers:
            conn.close()
        else:
            self._idle_readers.append(conn)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Tx]:
        """A write transaction (`BEGIN IMMEDIATE`), committed when the body returns, rolled back if it raises.

        Its statements run on the loop's thread; the commit (an fsync at FULL) is one round trip to the database
        thread, and so is the `BEGIN` when another process holds the lock."""
        async with self._write_lock:
            with self._said_when_refused():
                self._refuse_if_gone()
                tx = SqliteTx(self._writer, self.path, writing=True, hints=self._hints)
                try:
                    # Inside the try: a cancel that lands as the database thread's BEGIN succeeds leaves the
                    # transaction begun, and only this rollback ends it.
                    with refused_clearly(self.path):
                        await self._begin(self._writer)
                    yield tx
                except BaseException:
                    tx._run_undo()
                    self._writer.rollback()
                    raise
                else:
                    stayed_locked = "The state database stayed locked by another process; nothing was written."
                    with anyio.CancelScope(shield=True), refused_clearly(self.path, stayed_locked):
                        try:
                            await self._on_thread(self._writer.commit)
                        except sqlite3.OperationalError:
                            # A failed COMMIT keeps the transaction, and its lock, until this rollback.
                            tx._run_undo()
                            self._writer.rollback()
                            raise
                        await self._wrote(WRITE_PAGES)
                    tx._committed()

    async def _begin(self, conn: sqlite3.Connection) -> None:
        """`BEGIN IMMEDIATE` here at once; while another process holds the lock, on the database thread, in
        slices of BEGIN_SLICE_MS up to the busy timeout, so a cancel lands between slices with nothing begun."""
        if _try_begin(conn):
            return
        deadline = anyio.current_time() + self._busy_timeout_ms / 1000
        while not await self._on_thread(lambda: _try_begin(conn, BEGIN_SLICE_MS)):
            if anyio.current_time() >= deadline:
                raise DatabaseBusyError(LOCKED)
            await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()  # cancelled while the last slice began: the caller rolls back

    async def record(self, work: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        """`work` in a transaction on the appender (event appends), with the works of every other record ready at
        the same time (group commit: `_lead`), each in a savepoint of its own, so one that fails fails alone.

        The transaction runs whole on the loop's thread when the lock is free at once; while another process holds
        it, `BEGIN` waits on the database thread (one round trip). At `synchronous=NORMAL` a commit that does not
        checkpoint writes the WAL and never waits for the disk: it survives a killed process but may be lost with
        the last few commits if the machine loses power, while `write()` commits at FULL
        (docs/decisions/crash-safety.md). Once its transaction has begun, a record is not abandoned when its
        caller is cancelled."""
        queued = _Queued(work)
        self._queue.append(queued)
        try:
            while not queued.done:
                if self._leading:  # another record gathers this one into its transaction, or hands on to it
                    await queued.wait()
                else:
                    await self._lead()
        except BaseException:
            if not queued.taken:
                self._queue.remove(queued)
                raise
            with anyio.CancelScope(shield=True):
                while not queued.done:
                    await queued.wait()
            raise
        finally:
            if not self._leading and self._queue:  # a leader cancelled before it began: the next one leads
                self._queue[0].wake()
        if queued.error is not None:
            raise queued.error
        return cast(T, queued.value)

    async def _lead(self) -> None:
        """Wait one turn of the event loop, so that the records of other calls ready now join; then write every
        record waiting, in one transaction."""
        self._leading = True
        try:
            await anyio.lowlevel.checkpoint()
            async with self._write_lock:
                batch, self._queue = self._queue, []
                for queued in batch:
                    queued.taken = True
                with anyio.CancelScope(shield=True):
                    await self._append(batch)
        finally:
            self._leading = False

    async def _append(self, batch: list[_Queued]) -> None:
        conn = self._appender
        try:
            with self._said_when_refused():
                self._refuse_if_gone()
                with refused_clearly(self.path):
                    await self._begin(conn)
                try:
                    with refused_clearly(self.path):
                        self._run(conn, batch)
                        conn.commit()
                except BaseException:
                    conn.rollback()
                    raise
        except BaseException as exc:  # nothing was written: each record fails, with its own error if it had one
            for queued in batch:  # and its own copy of this one, not an exception raised in several tasks at once
                queued.error = queued.error or (copy.copy(exc) if len(batch) > 1 else exc)
            if not isinstance(exc, Exception):
                raise
            committed = False
        else:
            committed = True
        finally:
            for queued in batch:
                queued.finish()
        if committed:
            await self._wrote(RECORD_PAGES * len(batch))

    def _run(self, conn: sqlite3.Connection, batch: list[_Queued]) -> None:
        """Each record's work; with several, each in a savepoint, so that one failing is rolled back alone."""
        if len(batch) == 1:
            batch[0].value = drive(batch[0].work(SqliteTx(conn, self.path, hints=self._hints)))
            return
        for queued in batch:
            conn.execute("SAVEPOINT record")
            try:
                queued.value = drive(queued.work(SqliteTx(conn, self.path, hints=self._hints)))
            except Exception as exc:
                if not conn.in_transaction:  # SQLite ended the whole transaction (a full disk, an I/O error)
                    raise
                conn.execute("ROLLBACK TO record")
                queued.error = exc
            conn.execute("RELEASE record")

    async def _wrote(self, pages: int) -> None:
        """Every WAL_CHECKPOINT_PAGES or so, a checkpoint on the database thread (`_checkpoint`). Called with the
        write lock held: this process appends nothing meanwhile, so the checkpoint can copy the whole WAL."""
        self._pages += pages
        if self._pages >= WAL_CHECKPOINT_PAGES:
            self._pages = 0
            try:
                await self._on_thread(lambda: _checkpoint(self._appender))
            except sqlite3.Error as exc:  # the next one tries again; meanwhile the WAL grows a little
                log.warning("could not checkpoint the state database's WAL: %s", exc)

    @contextmanager
    def _said_when_refused(self) -> Iterator[None]:
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
        if identity(self.path) != self._identity:
            log.error(
                "the state database %s was deleted or replaced while the server ran; restart the server", self.path
            )
            raise DatabaseGoneError(GONE)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """A read-only snapshot on its own connection, so reads never wait for this process's writer; taken at
        its first statement."""
        tx = _Snapshot(self)
        try:
            yield tx
        finally:
            tx.end()


def _checkpoint(conn: sqlite3.Connection) -> None:
    """A passive checkpoint (it copies the WAL into the database file and syncs both), then, once the whole WAL was
    copied, a write that starts it over: the first commit into a fresh WAL syncs its header, even at NORMAL, and
    this one runs where the checkpoint does (the database thread), not in the appender's next commit on the loop's
    thread."""
    _, pages, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if pages <= 0 or copied < pages or not _try_begin(conn):
        return  # a reader of another process still needs the WAL, or a writer is at work
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        conn.execute(f"PRAGMA user_version={version}")  # page 1 written unchanged: one frame
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
