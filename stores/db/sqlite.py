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
    DAMAGED,
    StateFiles,
    companion,
    connect,
    move_aside,
    prepare,
    refuse_unusable_file,
    refused_clearly,
    remember,
    set_aside_stale,
    unusable,
)
from managed_tools.stores.db.wal_check import WalFrames, quick_check, read_wal, report_recovery
from managed_tools.stores.errors import (
    DatabaseBusyError,
    DatabaseDamagedError,
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
WAL_CHECKPOINT_BYTES = WAL_CHECKPOINT_PAGES * 4096
WAL_SIZE_PAGES = 32  # how often, in pages this process wrote, the WAL's size is looked at (`_wrote`)
# What a commit adds to the WAL, about, counted towards the next checkpoint (`_wrote`): a call's record (its events,
# their indexes, the session's and its usage's rows; fewer each when records share a commit), a write transaction
# (a memory version and its search index, the call's completion: more, and it varies).
RECORD_PAGES = 12
WRITE_PAGES = 24
BEGIN_SLICE_MS = 100
TRUNCATE_WAIT_MS = 50  # how long a checkpoint waits for readers before it settles for what they allow
REOPEN_SECONDS = 1.0  # between attempts to reopen state files that stay damaged


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
        self._generation = 0

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            assert not self._ended, "a read transaction used after it ended"
            self._generation = self._db._generation
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
                self._db._give_back(conn, self._generation)


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
        synchronous: Synchronous,
    ) -> None:
        self.path = path
        self.local_dir = path.parent
        self.key = str(path)
        self._files = StateFiles.of(path)  # the three files opened: any of them changing refuses writes
        self._damaged = False  # a file changed or SQLite found damage: reopen before the next write
        self._next_reopen = 0.0
        self._generation = 0  # counts reopenings: a reader of an earlier one is closed when given back
        self._borrowed = 0  # readers taken and not yet given back
        self._reopening = False  # no reader is handed out meanwhile (`_reopen`)
        self._synchronous: Synchronous = synchronous
        self._thread = thread  # its worker runs one step at a time, in order
        self._writer = thread._conn  # replaced when reopened (`_reopen`); the thread stays
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

        def first(conn: sqlite3.Connection, wal: WalFrames | None) -> None:
            report_recovery(conn, path, wal)
            prepare(conn, busy_timeout_ms)

        def opening() -> sqlite3.Connection:
            """On the database thread, aiosqlite's connector: the writer, with the appender and the readers made
            on the way (used on the loop's thread: `connect` makes every connection `check_same_thread=False`)."""
            path.parent.mkdir(parents=True, exist_ok=True)
            refuse_unusable_file(path)
            for aside in set_aside_stale(path):
                log.warning(
                    "the state database %s was replaced since a server last opened it: moved the log file it had "
                    "left beside it, which belongs to the old file, aside to %s (kept, not deleted)",
                    path,
                    aside,
                )
            wal = read_wal(path)  # before any connection recovers it
            _open_connections(
                path,
                busy_timeout_ms=busy_timeout_ms,
                readers=readers,
                synchronous=synchronous,
                opened=opened,
                first=lambda conn: first(conn, wal),
            )
            remember(path, StateFiles.of(path))
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
        return cls(
            path,
            thread=thread,
            appender=opened[1],
            readers=opened[2:],
            busy_timeout_ms=busy_timeout_ms,
            synchronous=synchronous,
        )

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._write_lock:  # a commit under way on the database thread finishes first
                self._closed = True
                for conn in [self._appender, *self._idle_readers]:
                    conn.close()
                self._idle_readers.clear()
                await self._on_thread(self._writer.close)  # the writer of the last reopening
                await self._thread.close()  # closes the first writer again (a no-op once closed); the thread ends

    async def _on_thread(self, step: Callable[[], T]) -> T:
        """`step` on the database thread: one round trip. Not abandoned when cancelled (a commit runs whole, a
        `BEGIN` is known to have begun or not before its caller rolls back)."""
        # `_execute` is the queue every aiosqlite method goes through (untyped): a function run on its thread.
        execute = cast(Callable[[Callable[[], T]], Awaitable[T]], self._thread._execute)
        with anyio.CancelScope(shield=True):
            done = await execute(step)
        return done

    def _take_reader(self) -> sqlite3.Connection:
        if self._reopening:
            raise DatabaseDamagedError(DAMAGED)
        # More snapshots open at once than connections kept: one more for this one (closed when given back).
        conn = self._idle_readers.pop() if self._idle_readers else connect(self.path, self._busy_timeout_ms, "NORMAL")
        self._borrowed += 1
        return conn

    def _give_back(self, conn: sqlite3.Connection, generation: int) -> None:
        self._borrowed -= 1
        if self._closed or generation != self._generation or len(self._idle_readers) >= self._keep_readers:
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
                await self._check_files()
                tx = SqliteTx(self._writer, self.path, writing=True, hints=self._hints)
                try:
                    # Inside the try: a cancel that lands as the database thread's BEGIN succeeds leaves the
                    # transaction begun, and only this rollback ends it.
                    with refused_clearly(self.path):
                        await self._begin(self._writer)
                    yield tx
                except BaseException as exc:
                    self._note_damage(exc)
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
        try:
            with self._said_when_refused():
                await self._check_files()
                conn = self._appender  # a new one if the check reopened the files
                with refused_clearly(self.path):
                    await self._begin(conn)
                try:
                    with refused_clearly(self.path):
                        self._run(conn, batch)
                        conn.commit()
                except BaseException as exc:
                    self._note_damage(exc)
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
        if self._pages < WAL_SIZE_PAGES:
            return
        # Other processes write to the same WAL: once this one wrote WAL_SIZE_PAGES since its last checkpoint, the
        # file's size at each commit says whether the WAL reached a checkpoint's worth (a stat), whoever wrote it.
        wal = companion(self.path, "-wal")
        if self._pages >= WAL_CHECKPOINT_PAGES or (wal.exists() and wal.stat().st_size >= WAL_CHECKPOINT_BYTES):
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

    async def _check_files(self) -> None:
        """Checked before every write (three stats, a few microseconds). A state file deleted or replaced under the
        running server would take writes no later start sees (the connections keep the old inode): refused until a
        restart. A write-ahead log deleted under it would take writes a kill loses, and a shared-memory index
        deleted or replaced leaves this process and the next to open the state each with its own index of one log
        (SQLite then reads pages that are not there: "malformed"): the write that finds either is refused, what the
        log held is copied into `state.db`, and the files are reopened (`_reopen`), as after SQLite found damage."""
        now = StateFiles.of(self.path)
        if now.db != self._files.db:
            log.error(
                "the state database %s was deleted or replaced while the server ran; restart the server", self.path
            )
            raise DatabaseGoneError(GONE)
        changed = self._files.changed(now)
        if changed:
            log.error(
                "the state database's %s (beside %s) was deleted or replaced while the server ran; nothing more "
                "is written through it: reopening the state",
                " and ".join(companion(self.path, suffix).name for suffix in changed),
                self.path,
            )
        elif not self._damaged:
            return
        elif anyio.current_time() < self._next_reopen:
            raise DatabaseDamagedError(DAMAGED)
        self._damaged = True
        # SQLite shares one index mapping among a process's connections to one file: every old connection must be
        # closed before a new one opens, or the new ones would keep the old index. So no reader is handed out
        # meanwhile, and the ones out are waited for (reads are short).
        self._reopening = True
        old, self._idle_readers = [self._writer, self._appender, *self._idle_readers], []
        self._generation += 1
        try:
            with anyio.move_on_after(REOPEN_SECONDS):
                while self._borrowed:  # noqa: ASYNC110 (given back on this thread, between two of our awaits)
                    await anyio.sleep(0.005)
            await self._on_thread(lambda: self._reopen(now, changed, old))
        except (sqlite3.Error, OSError, DatabaseDamagedError) as exc:
            self._next_reopen = anyio.current_time() + REOPEN_SECONDS
            log.error("could not reopen the state database %s (%s); writes are refused until it can", self.path, exc)
            raise DatabaseDamagedError(DAMAGED) from exc
        finally:
            self._reopening = False
        self._damaged = False
        log.warning("reopened the state database %s: it passed its quick check; writes are taken again", self.path)
        if changed:
            raise DatabaseDamagedError(DAMAGED)

    def _reopen(self, now: StateFiles, changed: list[str], old: list[sqlite3.Connection]) -> None:
        """On the database thread, under the write lock: save what a deleted log held, close the `old` connections,
        then open new ones."""
        if "-wal" in changed:
            if now.wal is None:
                # What the log held since the last checkpoint is now only in the open file of this process (and
                # of others that share it): copied into state.db, where any later start finds it.
                try:
                    _, pages, copied = self._writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    log.warning("copied %d of the %d frame(s) of the deleted log into %s", copied, pages, self.path)
                except sqlite3.ProgrammingError:  # closed by an earlier attempt, which copied what it could
                    pass
            if now.shm is not None and now.shm == self._files.shm:
                # The index describes the log that is gone: a connection trusting it would read frames that the
                # new log does not hold.
                aside = move_aside(companion(self.path, "-shm"))
                log.warning("moved the index of the log that is gone aside to %s (kept, not deleted)", aside)
        for conn in old:
            conn.close()
        opened: list[sqlite3.Connection] = []

        def checked(conn: sqlite3.Connection) -> None:
            if not quick_check(conn, self.path):
                raise DatabaseDamagedError(DAMAGED)

        try:
            _open_connections(
                self.path,
                busy_timeout_ms=self._busy_timeout_ms,
                readers=self._keep_readers,
                synchronous=self._synchronous,
                opened=opened,
                first=checked,
            )
        except BaseException:
            for conn in opened:
                conn.close()
            raise
        self._writer, self._appender, self._idle_readers = opened[0], opened[1], opened[2:]
        self._files = StateFiles.of(self.path)
        remember(self.path, self._files)

    def _note_damage(self, exc: BaseException) -> None:
        """SQLite found the state damaged in a statement: the next write reopens and checks it first."""
        if isinstance(exc, DatabaseDamagedError):
            self._damaged = True

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """A read-only snapshot on its own connection, so reads never wait for this process's writer; taken at
        its first statement."""
        tx = _Snapshot(self)
        try:
            yield tx
        except BaseException as exc:
            self._note_damage(exc)
            raise
        finally:
            tx.end()


def _open_connections(
    path: Path,
    *,
    busy_timeout_ms: int,
    readers: int,
    synchronous: Synchronous,
    opened: list[sqlite3.Connection],
    first: Callable[[sqlite3.Connection], None],
) -> None:
    """The writer (`first` runs on it before the others open), the appender, then the readers, into `opened`."""
    opened.append(connect(path, busy_timeout_ms, synchronous))
    first(opened[0])
    for _ in range(1 + max(1, readers)):
        opened.append(connect(path, busy_timeout_ms, "NORMAL"))
    # The writer and the appender begin on the loop's thread and must never wait there: a lock another process holds
    # sends their `BEGIN IMMEDIATE` to the database thread, which waits with the busy timeout.
    for conn in opened[:2]:
        conn.execute("PRAGMA busy_timeout=0")


def _checkpoint(conn: sqlite3.Connection) -> None:
    """The truncating checkpoint (it copies the whole WAL into the database file, syncs it and empties the WAL),
    waiting at most TRUNCATE_WAIT_MS for the readers still on the WAL, other processes' included, to finish: with
    several servers on one data dir some reader is nearly always on it, and a checkpoint that never waits then never
    starts the WAL over, which grew to 20 MB with 8 stdio servers (issue 39 F9). When readers stay, a passive one
    copied what they allow. Then, once the whole WAL was copied, a write that starts it over: the first commit into
    a fresh WAL syncs its header, even at NORMAL, and this one runs where the checkpoint does (the database thread),
    not in the appender's next commit on the loop's thread."""
    conn.execute(f"PRAGMA busy_timeout={TRUNCATE_WAIT_MS}")
    try:
        busy, pages, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute("PRAGMA busy_timeout=0")
    if not busy:
        pages = copied = 1  # emptied: start it over below
    if pages <= 0 or copied < pages or not _try_begin(conn):
        return  # a reader of another process still needs the WAL, or a writer is at work
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        conn.execute(f"PRAGMA user_version={version}")  # page 1 written unchanged: one frame
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
