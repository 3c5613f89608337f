"""The state database on PostgreSQL (`--database postgresql://...`), through asyncpg.

The stores rely on one guarantee SQLite's `BEGIN IMMEDIATE` gives them: a write transaction runs alone, so what it
read is still true when it writes (a compare-and-swap on `expectedVersionId`, a promotion's preconditions, an
approval decided once). Here every write transaction takes one transaction-scoped advisory lock before its first
statement, at READ COMMITTED: writers across every process and replica queue on it exactly as on SQLite's lock,
and each statement after it sees every write committed before (the lock is released only after a commit is
visible). Reads are REPEATABLE READ READ ONLY snapshots on pooled connections, as SQLite's WAL readers are.

PostgreSQL may go away under a running server (a restart, a failover) and come back. A statement on a dropped
connection raises DatabaseUnavailableError, one clear error for the call (its transaction never committed); the
dropped connection is replaced on its next use, with backoff between attempts (`_Reconnect`), so an outage costs
the calls made during it and the server keeps serving once PostgreSQL is back. The outage and the recovery are each
one log line.
"""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import asyncpg

from managed_tools.stores.db import LOCKED, Database, Params, Row, Synchronous, Tx, redacted
from managed_tools.stores.db.dialect import POSTGRESQL, placeholders
from managed_tools.stores.db.migrations import MIGRATIONS, statements
from managed_tools.stores.errors import DatabaseBusyError, DatabaseOpenError, DatabaseUnavailableError, StoreError

# The advisory lock keys (any two fixed bigints): every write transaction, and schema migrations.
WRITE_LOCK = 0x6D74_7772  # "mtwr"
MIGRATE_LOCK = 0x6D74_6D67  # "mtmg"

UNAVAILABLE = (
    "The state database (PostgreSQL) cannot be reached right now (restarting, or the network is down), so nothing "
    "was written. The server reconnects on its own: try again in a moment."
)
# Seconds between reconnect attempts while PostgreSQL stays away (the last one repeats); calls meanwhile fail at
# once instead of each waiting for a connect to time out.
BACKOFF_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)
CLOSE_TIMEOUT_SECONDS = 5.0
# Bounds that let a replica cut off from PostgreSQL (a partition, a frozen host) cost seconds, not minutes, to it and
# to every other replica (docs/decisions/postgresql-partitions.md). The server ends a session that sits in a
# transaction this long without a statement (a cut-off replica's, holding the write lock every writer queues on),
# cancels a statement that runs this long, and drops a connection whose sent data stays unacknowledged this long or
# whose peer stops answering keepalive probes; this side gives up on a statement a little after the server would
# have cancelled it, and drops the connection (its answer may never come).
IDLE_IN_TRANSACTION_MS = 10_000
STATEMENT_TIMEOUT_MS = 10_000
TCP_USER_TIMEOUT_MS = 10_000
KEEPALIVE = {"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3"}
COMMAND_MARGIN_SECONDS = 2.0

# What a dropped connection or an unreachable (or restarting) server raises. InterfaceError also means misuse of a
# connection, so it counts only when the connection is closed (`_is_down`).
_DOWN = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.IdleInTransactionSessionTimeoutError,
    asyncpg.QueryCanceledError,  # statement_timeout (a lock wait past lock_timeout is LockNotAvailableError: busy)
    TimeoutError,  # this side's command timeout: `PostgresTx._run` has dropped the connection
)
# What asyncpg says (an InterfaceError, or an InternalClientError "cannot switch to state 12; another operation (2)
# is in progress") when a connection is used while a statement cut off on it (by a cancel, a timeout, a server
# going down mid-statement) is still pending: the connection is unusable, not misused (issue 39 F12).
IN_PROGRESS = "another operation"

log = logging.getLogger("managed_tools.db")
T = TypeVar("T")

NUL = "PostgreSQL cannot store the NUL character (U+0000) this text holds; remove it and try again."


def _values(params: Params) -> list[Any]:
    if isinstance(params, dict):
        raise TypeError("PostgreSQL statements take positional `?` parameters")
    values = list(params)
    for value in values:
        if isinstance(value, str) and "\x00" in value:
            raise StoreError(NUL)
    return values


def _rowcount(status: str) -> int:
    """asyncpg's command tag ("UPDATE 3", "INSERT 0 1") as a row count."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else -1


@contextmanager
def _busy_is_an_error(message: str = LOCKED) -> Iterator[None]:
    """A write that waited longer than the busy timeout for another writer becomes an error a person can act on."""
    try:
        yield
    except asyncpg.LockNotAvailableError as exc:
        raise DatabaseBusyError(message) from exc


def _is_down(exc: BaseException, conn: asyncpg.Connection | None) -> bool:
    if isinstance(exc, _DOWN):
        return True
    if not isinstance(exc, asyncpg.InterfaceError | asyncpg.InternalClientError):
        return False
    if conn is not None and IN_PROGRESS in str(exc):
        conn.terminate()
        return True
    return conn is None or conn.is_closed()


class _Reconnect:
    """Connections to one server, made again after it went away: attempts spaced by BACKOFF_SECONDS, and one log
    line when it goes, one when it is back."""

    def __init__(self, url: str, busy_timeout_ms: int) -> None:
        self.url = url
        self.key = redacted(url)
        self.busy_timeout_ms = busy_timeout_ms
        self._down_since: float | None = None
        self._attempt = 0
        self._next_try = 0.0
        # Outages begun so far, and how many had begun when each connection was made: a connection found closed
        # after a later outage was logged is a leftover of that outage, not a new one.
        self._outages = 0
        self._made_after: weakref.WeakKeyDictionary[asyncpg.Connection, int] = weakref.WeakKeyDictionary()
        self._dropped: weakref.WeakSet[asyncpg.Connection] = weakref.WeakSet()  # by us: not an outage

    def drop(self, conn: asyncpg.Connection) -> None:
        """Close `conn` at once, on purpose (a statement cut off on it), so its next use replaces it quietly."""
        self._dropped.add(conn)
        conn.terminate()

    def adopt(self, conn: asyncpg.Connection) -> asyncpg.Connection:
        self._made_after[conn] = self._outages
        return conn

    async def connect(self) -> asyncpg.Connection:
        """A new connection, or DatabaseUnavailableError at once while the backoff since the last failure runs."""
        if anyio.current_time() < self._next_try:
            raise DatabaseUnavailableError(UNAVAILABLE)
        try:
            conn = await _connect(self.url, self.busy_timeout_ms)
        except (*_DOWN, TimeoutError, asyncpg.InterfaceError) as exc:
            self.lost(exc)
            self._next_try = anyio.current_time() + BACKOFF_SECONDS[min(self._attempt, len(BACKOFF_SECONDS) - 1)]
            self._attempt += 1
            raise DatabaseUnavailableError(UNAVAILABLE) from exc
        self.adopt(conn)
        self._attempt, self._next_try = 0, 0.0
        if self._down_since is not None:
            took = anyio.current_time() - self._down_since
            log.warning(
                "PostgreSQL at %s is reachable again (after %.1f s); serving as before", redacted(self.url), took
            )
            self._down_since = None
        return conn

    async def usable(self, conn: asyncpg.Connection | None) -> asyncpg.Connection:
        """`conn` if it is still open, else a new one (its drop noted as an outage)."""
        if conn is not None and not conn.is_closed():
            return conn
        if conn is not None and conn not in self._dropped:
            conn.terminate()
            self.lost(ConnectionError("the connection was closed by the server"), conn)
        return await self.connect()

    def lost(self, exc: BaseException, conn: asyncpg.Connection | None = None) -> None:
        """Note an outage (logged once), unless `conn` dropped in one already noted."""
        if conn is not None and self._made_after.get(conn, self._outages) < self._outages:
            return
        if self._down_since is None:
            self._down_since = anyio.current_time()
            self._outages += 1
            log.error(
                "lost the connection to PostgreSQL at %s (%s); calls that need the state fail with a clear error "
                "until it is back; reconnecting with backoff",
                self.key,
                type(exc).__name__,
            )

    @contextmanager
    def reachable(self, conn: asyncpg.Connection | None) -> Iterator[None]:
        """A dropped connection or a server going down, raised inside, becomes DatabaseUnavailableError."""
        try:
            yield
        except (*_DOWN, asyncpg.InterfaceError, asyncpg.InternalClientError) as exc:
            if not _is_down(exc, conn):
                raise
            self.lost(exc, conn)
            raise DatabaseUnavailableError(UNAVAILABLE) from exc


class PostgresTx(Tx):
    dialect = POSTGRESQL

    def __init__(self, conn: asyncpg.Connection, link: _Reconnect, *, writing: bool = False) -> None:
        super().__init__(writing=writing)
        self._conn = conn
        self._link = link

    async def _run(self, step: Callable[[], Awaitable[T]]) -> T:
        with self._link.reachable(self._conn):
            try:
                return await step()
            except (TimeoutError, anyio.get_cancelled_exc_class()):
                # A statement cut off mid-flight keeps the connection busy until the server answers asyncpg's cancel
                # request, which a partition delays for good (then every use says IN_PROGRESS): drop it instead;
                # the server rolls its transaction back, and the slot is refilled on its next use.
                self._link.drop(self._conn)
                raise

    async def execute(self, sql: str, params: Params = ()) -> int:
        values = _values(params)
        return _rowcount(await self._run(lambda: self._conn.execute(placeholders(sql), *values)))

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        values = [_values(row) for row in rows]
        await self._run(lambda: self._conn.executemany(placeholders(sql), values))

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        values = _values(params)
        return list(await self._run(lambda: self._conn.fetch(placeholders(sql), *values)))

    async def _statement(self, sql: str) -> None:
        await self._run(lambda: self._conn.execute(sql))


class PostgresDatabase(Database):
    """One writer connection (this process's writes queue on a lock before the shared advisory lock) and a pool of
    reader connections."""

    dialect = POSTGRESQL

    def __init__(
        self, link: _Reconnect, local_dir: Path, writer: asyncpg.Connection, readers: list[asyncpg.Connection]
    ) -> None:
        self.key = link.key
        self.local_dir = local_dir
        self._link = link
        # A slot is None once its connection was found dropped and could not be replaced yet.
        self._writer: asyncpg.Connection | None = writer
        self._write_lock = anyio.Lock()
        self._reader_send, self._reader_recv = anyio.create_memory_object_stream[asyncpg.Connection | None](
            len(readers)
        )
        for conn in readers:
            self._reader_send.send_nowait(conn)
        self._durable = True

    @classmethod
    async def connect(
        cls, url: str, *, local_dir: Path, busy_timeout_ms: int, readers: int, synchronous: Synchronous
    ) -> PostgresDatabase:
        opened: list[asyncpg.Connection] = []
        try:
            for _ in range(1 + max(1, readers)):
                opened.append(await _connect(url, busy_timeout_ms))
            await _migrate(opened[0])
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                for conn in opened:
                    await conn.close()
            if isinstance(exc, OSError | asyncpg.PostgresError | asyncpg.InterfaceError):
                raise DatabaseOpenError(_unusable(url, exc)) from exc
            raise
        link = _Reconnect(url, busy_timeout_ms)
        db = cls(link, local_dir, link.adopt(opened[0]), [link.adopt(conn) for conn in opened[1:]])
        db._durable = synchronous == "FULL"
        return db

    async def dedicated_connection(self) -> asyncpg.Connection:
        """A connection outside the pools, its owner's alone (LISTEN for change notices). Raises what asyncpg
        raises when the server cannot be reached."""
        return await _connect(self._link.url, self._link.busy_timeout_ms)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            conns = [self._writer]
            while True:
                try:
                    conns.append(self._reader_recv.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
            for conn in conns:
                if conn is not None and not conn.is_closed():
                    try:
                        await conn.close(timeout=CLOSE_TIMEOUT_SECONDS)
                    except (*_DOWN, TimeoutError, asyncpg.InterfaceError):
                        conn.terminate()  # the server went away: nothing to say goodbye to
            self._reader_send.close()
            self._reader_recv.close()

    @asynccontextmanager
    async def _locked(self, *, durable: bool, writing: bool) -> AsyncIterator[Tx]:
        async with self._write_lock:
            conn = self._writer = await self._link.usable(self._writer)
            tx = PostgresTx(conn, self._link, writing=writing)
            try:  # BEGIN inside: a call cancelled while it runs must not leave the connection in a transaction
                await tx._statement("BEGIN ISOLATION LEVEL READ COMMITTED")
                if not durable:
                    await tx._statement("SET LOCAL synchronous_commit = off")
                with _busy_is_an_error():
                    await tx._statement(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                yield tx
            except BaseException:
                with anyio.CancelScope(shield=True):
                    tx._run_undo()
                    await _roll_back(conn)
                raise
            with anyio.CancelScope(shield=True):
                try:
                    await tx._statement("COMMIT")
                except BaseException:
                    tx._run_undo()
                    await _roll_back(conn)
                    raise
            tx._committed()

    def write(self) -> AbstractAsyncContextManager[Tx]:
        return self._locked(durable=self._durable, writing=True)

    async def record(self, work: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        # One short transaction, committed without waiting for the WAL flush: like SQLite's appender at NORMAL,
        # a server crash may lose the last few, never corrupt.
        async with self._locked(durable=False, writing=False) as tx:
            return await work(tx)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        slot = await self._reader_recv.receive()
        try:
            conn = slot = await self._link.usable(slot)
            tx = PostgresTx(conn, self._link)
            try:
                await tx._statement("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                yield tx
            finally:
                with anyio.CancelScope(shield=True):
                    await _roll_back(conn)
        finally:
            self._reader_send.send_nowait(slot if slot is None or not slot.is_closed() else None)


async def _roll_back(conn: asyncpg.Connection) -> None:
    """End the open transaction, if the connection still holds one; a connection that dropped meanwhile has none
    left (the server rolled it back) and is replaced on its next use."""
    if conn.is_closed() or not conn.is_in_transaction():
        return
    try:
        await conn.execute("ROLLBACK")
    except (*_DOWN, asyncpg.InterfaceError, asyncpg.InternalClientError):
        conn.terminate()


async def _connect(url: str, busy_timeout_ms: int) -> asyncpg.Connection:
    # lock_timeout bounds the wait for another process's write transaction, like SQLite's busy timeout.
    # A statement may wait out the lock timeout (then `busy`) before its own bound ends.
    statement_ms = max(STATEMENT_TIMEOUT_MS, int(busy_timeout_ms) + 2_000)
    settings = {
        "lock_timeout": str(max(1, int(busy_timeout_ms))),
        "timezone": "UTC",
        "statement_timeout": str(statement_ms),
        "idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_MS),
        "tcp_user_timeout": str(TCP_USER_TIMEOUT_MS),
        **KEEPALIVE,
    }
    return await asyncpg.connect(
        url,
        server_settings=settings,
        timeout=max(busy_timeout_ms / 1000, 5.0),
        command_timeout=statement_ms / 1000 + COMMAND_MARGIN_SECONDS,
    )


def _unusable(url: str, exc: BaseException) -> str:
    """Why the database cannot be used and what to do, in one sentence without the password."""
    where = redacted(url)
    if isinstance(exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError):
        return f"PostgreSQL refused the credentials for {where}; check the user and password."
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"The database of {where} does not exist; create it (createdb) or choose another."
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return f"The user of {where} may not create the state's tables; grant it CREATE on the schema."
    if isinstance(exc, OSError | TimeoutError):
        return f"Cannot reach PostgreSQL at {where}: {exc.strerror or exc}; is the server running?"
    message = re.sub(r"postgres(?:ql)?://\S+", where, str(exc))
    return f"Cannot use the PostgreSQL database {where} ({type(exc).__name__}: {message})."


async def _migrate(conn: asyncpg.Connection) -> None:
    """Apply the migrations not yet recorded, each in its own transaction under the migration lock, so processes
    starting together apply each once."""
    for migration in MIGRATIONS:
        version, name = migration[0], migration[1]
        async with conn.transaction():
            await conn.execute(f"SELECT pg_advisory_xact_lock({MIGRATE_LOCK})")
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at TEXT NOT NULL DEFAULT to_char(now() AT TIME ZONE 'UTC', "
                '\'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\'))'
            )
            if await conn.fetchval("SELECT 1 FROM schema_migrations WHERE version = $1", version) is None:
                for statement in statements(migration, "postgresql"):
                    await conn.execute(statement)
                await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name)
