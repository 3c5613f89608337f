"""The state database, whichever engine holds it: one `Database` interface, one `Tx` every store writes through.

`Database.open` picks the engine: a file path is SQLite (`stores.db.sqlite`, the embedded default), a
`postgresql://` URL is PostgreSQL (`stores.db.postgres`). Stores write one body of SQL in SQLite's spelling with `?`
placeholders; what differs between the engines is named once, on `tx.dialect` (`stores.db.dialect`), never branched on
in a store. Both engines give a store the same guarantees: every `write()` transaction runs alone among all the
processes sharing the database (so a read-then-write inside it, such as a compare-and-swap on `expectedVersionId`,
has exactly one winner), and `read()` is one consistent snapshot.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
from pydantic import BaseModel

from managed_tools.stores.db.dialect import Dialect
from managed_tools.stores.errors import DatabaseOpenError

Params = Sequence[Any] | dict[str, Any]

DEFAULT_BUSY_TIMEOUT_MS = 5_000
DEFAULT_READERS = 2

Synchronous = Literal["NORMAL", "FULL"]
# A write transaction (memory, substrate versions, approvals, ...) is on disk before its caller hears it
# committed: WAL at NORMAL would lose the last commits to a power cut (docs/decisions/crash-safety.md has the figures).
DURABLE: Synchronous = "FULL"

LOCKED = "The state database is locked by another process; try again in a moment."

log = logging.getLogger("managed_tools.db")

Undo = Callable[[], None]
T = TypeVar("T")


class Row(Protocol):
    """A result row, by position or by column name (sqlite3.Row and asyncpg's Record both are)."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> Iterable[str]: ...


def as_dict(row: Row) -> dict[str, Any]:
    return {key: row[key] for key in row.keys()}  # noqa: SIM118 (iterating a sqlite3.Row yields its values)


async def insert(tx: Tx, table: str, record: BaseModel) -> None:
    """`record` as a new row of `table`: a store's record model names its columns, so neither list is kept twice."""
    values = record.model_dump()
    marks = ", ".join("?" * len(values))
    await tx.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks})", list(values.values()))


class Tx(ABC):
    """One open transaction. Savepoints nest inside it; nothing is visible to others until it commits."""

    dialect: Dialect

    def __init__(self, *, writing: bool = False, hints: dict[str, int] | None = None) -> None:
        self._depth = 0
        self._writing = writing
        # What a store learned about the database in this process's earlier transactions, to save a statement: only
        # lower bounds of values that never decrease (the event index's mark), never trusted for more.
        self.hints: dict[str, int] = {} if hints is None else hints
        self._undo: list[Undo] = []
        self._after_commit: list[Undo] = []

    @property
    def writing(self) -> bool:
        """Is this the write transaction (Database.write), where effects outside the database can be undone?"""
        return self._writing

    def on_rollback(self, undo: Undo) -> None:
        """Run `undo` if this write transaction rolls back: the inverse of an effect outside the database (a
        file renamed into place), so the two never disagree. It runs before the rollback releases the write
        lock, so no other process can see the effect in between, or change it first."""
        if not self._writing:
            raise RuntimeError("on_rollback needs a write transaction (Database.write).")
        self._undo.append(undo)

    def on_commit(self, step: Undo) -> None:
        """Run `step` once this write transaction has committed (a note that only mattered until then)."""
        if not self._writing:
            raise RuntimeError("on_commit needs a write transaction (Database.write).")
        self._after_commit.append(step)

    def _run_undo(self, keep: int = 0) -> None:
        """Newest first; a failing undo is logged and the rest still run."""
        while len(self._undo) > keep:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:
                log.exception("an undo step failed while rolling back; the state outside the database may differ")

    def _committed(self) -> None:
        self._undo.clear()
        for step in self._after_commit:
            try:
                step()
            except Exception:
                log.exception("a step after a commit failed; the commit itself stands")

    @abstractmethod
    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; returns the number of rows it changed."""

    @abstractmethod
    async def executemany(self, sql: str, rows: Iterable[Params]) -> None: ...

    @abstractmethod
    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        """Every row; one hop to the database."""

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        """The first row; callers bound their queries (LIMIT 1 or a key) so nothing large is fetched."""
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def scalar(self, sql: str, params: Params = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]

    @abstractmethod
    async def _statement(self, sql: str) -> None:
        """Run a fixed statement of the transaction's own (a savepoint)."""

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[Tx]:
        """A nested unit of work: rolled back on its own if the body raises, released otherwise."""
        self._depth += 1
        name = f"sp_{self._depth}"
        undo_mark = len(self._undo)
        await self._statement(f"SAVEPOINT {name}")
        try:
            yield self
        except BaseException:
            with anyio.CancelScope(shield=True):
                self._run_undo(keep=undo_mark)
                await self._statement(f"ROLLBACK TO SAVEPOINT {name}")
                await self._statement(f"RELEASE SAVEPOINT {name}")
            raise
        else:
            await self._statement(f"RELEASE SAVEPOINT {name}")
        finally:
            self._depth -= 1


class NoTransaction(Tx):
    """The `tx` of a handler that opens its own short transactions (it waits on a process, which must not hold
    the database meanwhile): any use of it is a programming error, caught at once rather than silently unlocked."""

    def _refuse(self) -> RuntimeError:
        return RuntimeError("This tool opens its own transactions (db.read() / db.write()); ctx.tx is not open.")

    async def execute(self, sql: str, params: Params = ()) -> int:
        raise self._refuse()

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        raise self._refuse()

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        raise self._refuse()

    async def _statement(self, sql: str) -> None:
        raise self._refuse()


class Database(ABC):
    """The state database. Open it with `Database.open(target)`; it applies pending migrations first."""

    dialect: Dialect
    local_dir: Path  # this machine's data dir: notes that must sit beside the files they describe (substrate)
    key: str  # names this database among others in one process (never a password)

    @classmethod
    async def open(
        cls,
        target: Path | str,
        *,
        local_dir: Path | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        readers: int = DEFAULT_READERS,
        synchronous: Synchronous = DURABLE,
    ) -> Database:
        """A file path opens SQLite; a `postgresql://` URL opens PostgreSQL (with `local_dir`, the data dir).

        `synchronous` applies to `write()` transactions (FULL unless a benchmark compares it with NORMAL).
        Raises DatabaseOpenError, saying what to do, when the database cannot be used."""
        if is_database_url(target):
            try:
                from managed_tools.stores.db.postgres import PostgresDatabase
            except ImportError as exc:  # asyncpg is the optional extra
                raise DatabaseOpenError(
                    "PostgreSQL needs the asyncpg driver: pip install -c constraints.txt '.[postgres]' "
                    "(in the clone the server was installed from)."
                ) from exc

            if local_dir is None:
                raise ValueError("a PostgreSQL database needs the local data dir")
            return await PostgresDatabase.connect(
                str(target), local_dir=local_dir, busy_timeout_ms=busy_timeout_ms, readers=readers,
                synchronous=synchronous,
            )  # fmt: skip
        from managed_tools.stores.db.sqlite import SqliteDatabase

        return await SqliteDatabase.connect(
            Path(target), busy_timeout_ms=busy_timeout_ms, readers=readers, synchronous=synchronous
        )

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    def write(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction that runs alone among every process sharing the database; committed when the body
        returns (durably), rolled back if it raises."""

    @abstractmethod
    async def record(self, work: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        """A short write that awaits nothing but its own statements (event appends): one transaction, run whole in
        one round trip where the engine can. It may be lost with the last few commits if the machine loses power
        (docs/decisions/crash-safety.md)."""

    @abstractmethod
    def read(self) -> AbstractAsyncContextManager[Tx]:
        """A read-only snapshot, on a pooled connection so reads never wait for this process's writer."""


def is_database_url(target: Path | str) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def redacted(url: str) -> str:
    """The URL without its password, fit for an error message or a log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
