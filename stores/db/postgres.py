"""The state database on PostgreSQL (`--database postgresql://...`), through asyncpg.

The stores rely on one guarantee SQLite's `BEGIN IMMEDIATE` gives them: a write transaction runs alone, so what it
read is still true when it writes (a compare-and-swap on `expectedVersionId`, a promotion's preconditions, an
approval decided once). Here every write transaction takes one transaction-scoped advisory lock before its first
statement, at READ COMMITTED: writers across every process and replica queue on it exactly as on SQLite's lock,
and each statement after it sees every write committed before (the lock is released only after a commit is
visible). Reads are REPEATABLE READ READ ONLY snapshots on pooled connections, as SQLite's WAL readers are.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import asyncpg

from managed_tools.stores.db import LOCKED, Database, Params, Row, Synchronous, Tx, redacted
from managed_tools.stores.db.dialect import POSTGRESQL, placeholders
from managed_tools.stores.db.migrations import MIGRATIONS, statements
from managed_tools.stores.errors import DatabaseBusyError, DatabaseOpenError, StoreError

# The advisory lock keys (any two fixed bigints): every write transaction, and schema migrations.
WRITE_LOCK = 0x6D74_7772  # "mtwr"
MIGRATE_LOCK = 0x6D74_6D67  # "mtmg"

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
    except (asyncpg.LockNotAvailableError, asyncpg.QueryCanceledError) as exc:
        raise DatabaseBusyError(message) from exc


class PostgresTx(Tx):
    dialect = POSTGRESQL

    def __init__(self, conn: asyncpg.Connection, *, writing: bool = False) -> None:
        super().__init__(writing=writing)
        self._conn = conn

    async def execute(self, sql: str, params: Params = ()) -> int:
        return _rowcount(await self._conn.execute(placeholders(sql), *_values(params)))

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        await self._conn.executemany(placeholders(sql), [_values(row) for row in rows])

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return list(await self._conn.fetch(placeholders(sql), *_values(params)))

    async def _statement(self, sql: str) -> None:
        await self._conn.execute(sql)


class PostgresDatabase(Database):
    """One writer connection (this process's writes queue on a lock before the shared advisory lock) and a pool of
    reader connections."""

    dialect = POSTGRESQL

    def __init__(
        self, url: str, local_dir: Path, writer: asyncpg.Connection, readers: list[asyncpg.Connection]
    ) -> None:
        self.key = redacted(url)
        self.local_dir = local_dir
        self._url = url
        self._busy_timeout_ms = 5_000
        self._writer = writer
        self._readers = readers
        self._write_lock = anyio.Lock()
        self._reader_send, self._reader_recv = anyio.create_memory_object_stream[asyncpg.Connection](len(readers))
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
        db = cls(url, local_dir, opened[0], opened[1:])
        db._durable = synchronous == "FULL"
        db._busy_timeout_ms = busy_timeout_ms
        return db

    async def dedicated_connection(self) -> asyncpg.Connection:
        """A connection outside the pools, its owner's alone (LISTEN for change notices). Raises what asyncpg
        raises when the server cannot be reached."""
        return await _connect(self._url, self._busy_timeout_ms)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            for conn in [self._writer, *self._readers]:
                await conn.close()
            self._reader_send.close()
            self._reader_recv.close()

    @asynccontextmanager
    async def _locked(self, *, durable: bool, writing: bool) -> AsyncIterator[Tx]:
        async with self._write_lock:
            conn = self._writer
            await conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            tx = PostgresTx(conn, writing=writing)
            try:
                if not durable:
                    await conn.execute("SET LOCAL synchronous_commit = off")
                with _busy_is_an_error():
                    await conn.execute(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                yield tx
            except BaseException:
                with anyio.CancelScope(shield=True):
                    tx._run_undo()
                    await conn.execute("ROLLBACK")
                raise
            with anyio.CancelScope(shield=True):
                try:
                    await conn.execute("COMMIT")
                except BaseException:
                    tx._run_undo()
                    if not conn.is_closed() and conn.is_in_transaction():
                        await conn.execute("ROLLBACK")
                    raise
            tx._committed()

    def write(self) -> AbstractAsyncContextManager[Tx]:
        return self._locked(durable=self._durable, writing=True)

    def autocommit(self) -> AbstractAsyncContextManager[Tx]:
        # One short transaction for the block (callers append one event), committed without waiting for the
        # WAL flush: like SQLite's appender at NORMAL, a server crash may lose the last few, never corrupt.
        return self._locked(durable=False, writing=False)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        conn = await self._reader_recv.receive()
        try:
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield PostgresTx(conn)
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.execute("ROLLBACK")
        finally:
            self._reader_send.send_nowait(conn)


async def _connect(url: str, busy_timeout_ms: int) -> asyncpg.Connection:
    # lock_timeout bounds the wait for another process's write transaction, like SQLite's busy timeout.
    settings = {"lock_timeout": str(max(1, int(busy_timeout_ms))), "timezone": "UTC"}
    return await asyncpg.connect(url, server_settings=settings, timeout=max(busy_timeout_ms / 1000, 5.0))


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
