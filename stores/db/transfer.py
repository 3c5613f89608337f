"""Copy an SQLite state into PostgreSQL (`managed-tools migrate`): every table, in one transaction, verified.

Both databases are first brought to the same schema by their migrations, so the tables and columns match; what
exists only on PostgreSQL (a search text's words and token count, the events' search rows) is computed here as the
stores compute it when they write. Nothing is committed unless every table's row count matches its source's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from managed_tools.stores.db import Database, Tx, fulltext
from managed_tools.stores.errors import StoreError
from managed_tools.stores.events import event_text, index_event

BATCH = 1000
# The identity columns whose sequences continue after the copied rows.
_IDENTITIES = {"events": "seq", "search_docs": "id", "substrate_versions": "seq", "shell_commands": "seq"}


class Copied(BaseModel):
    table: str
    rows: int


async def _tables(source: Tx) -> list[str]:
    """The source's own tables in creation order (a table comes after those it references); FTS5's index and
    its shadow tables are rebuilt, not copied, and the change notices are SQLite's transient relay (PostgreSQL's
    go by NOTIFY)."""
    rows = await source.fetchall(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND sql NOT LIKE "
        "'CREATE VIRTUAL TABLE%' AND name NOT LIKE '%_fts_%' AND name NOT IN ('schema_migrations', 'notices') "
        "ORDER BY rowid"
    )
    return [str(r[0]) for r in rows]


async def _columns(source: Tx, table: str) -> list[tuple[str, str]]:
    return [(str(r["name"]), str(r["type"]).upper()) for r in await source.fetchall(f"PRAGMA table_info({table})")]


async def _empty(target: Tx, tables: list[str]) -> list[str]:
    return [t for t in tables if await target.scalar(f"SELECT 1 FROM {t} LIMIT 1") is not None]


def _convert(types: list[str]) -> Callable[[tuple[Any, ...]], list[Any]]:
    """SQLite keeps a whole REAL as an integer; PostgreSQL's double precision wants a float."""
    real = [i for i, kind in enumerate(types) if kind == "REAL"]

    def convert(row: tuple[Any, ...]) -> list[Any]:
        values = list(row)
        for i in real:
            if isinstance(values[i], int):
                values[i] = float(values[i])
        return values

    return convert


async def _copy_table(source: Tx, target: Tx, table: str) -> int:
    columns = await _columns(source, table)
    names = [name for name, _ in columns]
    convert = _convert([kind for _, kind in columns])
    extra, marks = "", ", ".join("?" * len(names))
    if table == "search_docs":  # the words and token count the PostgreSQL index keeps beside each text
        extra, marks = ", tokens, words", marks + ", ?, ?::tsvector"
    insert = f"INSERT INTO {table} ({', '.join(names)}{extra}) VALUES ({marks})"
    last, copied = -1, 0
    while True:
        rows = await source.fetchall(
            f"SELECT rowid, {', '.join(names)} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT ?", (last, BATCH)
        )
        if not rows:
            return copied
        batch = []
        for row in rows:
            values = convert(tuple(row[name] for name in names))
            if table == "search_docs":
                words = fulltext.words(row["body"])
                values += [len(words), fulltext.tsvector(words)]
            batch.append(values)
        await target.executemany(insert, batch)
        if table == "events":
            for row in rows:
                payload = _payload(row["payload"])
                text = event_text(row["type"], row["summary"], payload)
                if text is not None:
                    await index_event(target, int(row["seq"]), row["session_id"], row["type"], text)
        copied += len(rows)
        last = int(rows[-1][0])  # named for its alias (seq, id) where a table has one


def _payload(raw: str) -> dict[str, Any]:
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


async def copy_state(source: Database, target: Database, *, replace: bool = False) -> list[Copied]:
    """Copy every table of `source` (SQLite) into `target` (PostgreSQL) in one transaction; returns each table's
    row count. Refuses a target that holds any state unless `replace`, which empties it first (in the same
    transaction: on failure the target keeps what it had)."""
    if source.dialect.name != "sqlite" or target.dialect.name != "postgresql":
        raise StoreError("migrate copies an SQLite state into PostgreSQL.")
    async with source.read() as reader, target.write() as writer:
        source_versions = [r[0] for r in await reader.fetchall("SELECT version FROM schema_migrations ORDER BY 1")]
        target_versions = [r[0] for r in await writer.fetchall("SELECT version FROM schema_migrations ORDER BY 1")]
        if source_versions != target_versions:
            raise StoreError("The two databases are at different schema versions; run the same managed-tools on both.")
        tables = await _tables(reader)
        if occupied := await _empty(writer, [*tables, "event_search"]):
            if not replace:
                raise StoreError(
                    f"The target database already holds state ({', '.join(occupied)}); migrate refuses to mix two "
                    "states. Use an empty database, or --replace to empty this one first."
                )
            await writer.execute(f"TRUNCATE {', '.join([*tables, 'event_search'])} RESTART IDENTITY CASCADE")
        copied = [Copied(table=t, rows=await _copy_table(reader, writer, t)) for t in tables]
        for table, column in _IDENTITIES.items():
            await writer.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                f"(SELECT COALESCE(MAX({column}), 0) + 1 FROM {table}), false)"
            )
        for entry in copied:
            there = int(await writer.scalar(f"SELECT COUNT(*) FROM {entry.table}"))
            here = int(await reader.scalar(f"SELECT COUNT(*) FROM {entry.table}"))
            if there != here or there != entry.rows:
                raise StoreError(f"{entry.table}: {here} rows in the source but {there} copied; nothing was kept.")
        return copied
