"""A call's record (`Database.record`) on a real SQLite file: written on the loop's thread when the lock is free, on
the database thread while another connection holds it, and never checkpointed on the loop's thread (the WAL stays
bounded by checkpoints on a thread of their own)."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AsyncExitStack
from typing import TypeVar

import anyio
import pytest
from conftest import Connect, count_hops, data
from mcp import Client

from managed_tools.stores import events
from managed_tools.stores.db import Tx
from managed_tools.stores.db.sqlite import SqliteDatabase
from managed_tools.stores.db.sqlite_file import WAL_SIZE_LIMIT
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio
T = TypeVar("T")


def sqlite_of(runtime: Runtime) -> SqliteDatabase:
    db = runtime.db
    assert isinstance(db, SqliteDatabase)
    return db


async def completions(runtime: Runtime, tool: str) -> list[str]:
    async with runtime.db.read() as tx:
        rows = await tx.fetchall(
            "SELECT json_extract(payload, '$.result') AS result FROM events WHERE type = 'span.completed' "
            "AND json_extract(payload, '$.toolName') = ? ORDER BY seq",
            (tool,),
        )
    return [str(row["result"]) for row in rows]


async def test_a_record_waits_for_another_connections_lock_on_the_database_thread(
    runtime: Runtime, connect: Connect
) -> None:
    """Another connection (to SQLite, another process) holds the write lock: the record's BEGIN goes to the database
    thread and waits there, the loop stays free meanwhile, and the call is answered once its record is written."""
    db = sqlite_of(runtime)
    async with connect(runtime) as client:
        data(await client.call_tool("memory_read", {"target": "session_state"}))
        db._pages = 0  # the WAL's periodic checkpoint (every few calls) is a hop of its own, not the one measured
        hops = count_hops(runtime)
        data(await client.call_tool("memory_read", {"target": "session_state"}))
        assert hops == []  # the lock was free: written on the loop's thread
        other = sqlite3.connect(db.path, timeout=0, check_same_thread=False)
        results = []
        ticks = 0
        answered = anyio.Event()

        async def tick() -> None:
            nonlocal ticks
            while not answered.is_set():
                ticks += 1
                await anyio.sleep(0.01)

        async def calling() -> None:
            results.append(await client.call_tool("memory_read", {"target": "session_state"}))
            answered.set()

        try:
            other.execute("BEGIN IMMEDIATE")
            async with anyio.create_task_group() as tg:
                tg.start_soon(tick)
                tg.start_soon(calling)
                await anyio.sleep(0.3)
                assert not answered.is_set()  # its record waits, so its answer does too
                other.rollback()
                with anyio.fail_after(10):
                    await answered.wait()
        finally:
            other.close()
    data(results[0])
    assert hops and ticks >= 10  # the wait ran on the database thread: the loop ticked meanwhile
    assert await completions(runtime, "memory_read") == ["success"] * 3


async def test_checkpoints_run_off_the_loop_thread_and_keep_the_wal_bounded(runtime: Runtime, connect: Connect) -> None:
    """Read-only calls write only through the appender: its commits never checkpoint (a checkpoint syncs the
    disk), the database thread does it every few records and starts the WAL over, so it stays small."""
    db = sqlite_of(runtime)
    assert db._appender.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    checkpointed_on: set[int] = set()
    written_on: set[int] = set()

    def traced(statement: str) -> None:
        if "wal_checkpoint" in statement:
            checkpointed_on.add(threading.get_ident())
        elif statement.startswith("INSERT INTO events"):
            written_on.add(threading.get_ident())

    db._appender.set_trace_callback(traced)
    wal = db.path.with_name(db.path.name + "-wal")
    largest = 0
    async with connect(runtime) as client:
        for _ in range(400):  # about 5 MB of WAL unless checkpointed
            data(await client.call_tool("memory_read", {"target": "session_state"}))
            largest = max(largest, wal.stat().st_size)
    loop = threading.get_ident()
    assert written_on == {loop} and checkpointed_on and loop not in checkpointed_on
    assert largest <= WAL_SIZE_LIMIT, largest


async def test_records_ready_together_share_one_transaction_and_one_failing_fails_alone(
    runtime: Runtime, connect: Connect
) -> None:
    """Group commit: records ready in the same turn of the loop are written in one transaction, each in a
    savepoint of its own. Real tool calls from several clients at once, plus one record whose work fails (an
    event for a session that does not exist): every call succeeds and is recorded, the failing record raises its
    own error and leaves nothing behind."""
    db = sqlite_of(runtime)
    db._pages = -1_000_000  # no checkpoint (its own short transaction) falls due meanwhile
    transactions: list[str] = []
    db._appender.set_trace_callback(lambda sql: transactions.append(sql) if sql == "BEGIN IMMEDIATE" else None)

    async def orphan(tx: Tx) -> None:
        await events.append_event(tx, "no-such-session", None, "user.note", {"text": "orphan"})

    failures: list[BaseException] = []

    async def failing() -> None:
        try:
            await db.record(orphan)
        except sqlite3.IntegrityError as exc:
            failures.append(exc)

    answers: list[dict[str, object]] = []
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(connect(runtime)) for _ in range(8)]
        await anyio.sleep(0.1)
        transactions.clear()

        async def calls(client: Client) -> None:
            for _ in range(4):
                answers.append(data(await client.call_tool("memory_read", {"target": "session_state"})))

        async with anyio.create_task_group() as tg:
            for client in clients:
                tg.start_soon(calls, client)
            tg.start_soon(failing)
    assert len(answers) == 32 and len(failures) == 1
    assert "FOREIGN KEY" in str(failures[0])
    assert len(transactions) < 33, len(transactions)  # 33 records, fewer transactions
    assert await completions(runtime, "memory_read") == ["success"] * 32
    async with db.read() as tx:
        assert await tx.scalar("SELECT count(*) FROM events WHERE session_id = 'no-such-session'") == 0


async def test_records_started_in_one_turn_are_one_transaction(runtime: Runtime, connect: Connect) -> None:
    db = sqlite_of(runtime)
    async with connect(runtime) as client:
        session = str(data(await client.call_tool("session_get_snapshot", {}))["sessionId"])
    await anyio.sleep(0.1)  # the wake's end, recorded as the client left
    db._pages = -1_000_000  # no checkpoint (its own short transaction) falls due meanwhile
    transactions: list[str] = []
    db._appender.set_trace_callback(lambda sql: transactions.append(sql) if sql == "BEGIN IMMEDIATE" else None)
    written: list[int] = []

    async def note(n: int) -> None:
        record = await db.record(lambda tx: events.append_event(tx, session, None, "user.note", {"n": n}))
        written.append(record.seq)

    async with anyio.create_task_group() as tg:
        for n in range(16):
            tg.start_soon(note, n)
    assert len(transactions) == 1 and len(set(written)) == 16


async def test_a_record_cancelled_while_it_waits_is_not_written_and_the_next_one_leads(
    runtime: Runtime, connect: Connect
) -> None:
    """Two records wait while a write transaction holds the lock: the first (which would have led their
    transaction) is cancelled and leaves nothing; the second is written once the lock is free."""
    db = sqlite_of(runtime)
    async with connect(runtime) as client:
        session = str(data(await client.call_tool("session_get_snapshot", {}))["sessionId"])

    async def note(text: str) -> None:
        await db.record(lambda tx: events.append_event(tx, session, None, "user.note", {"text": text}))

    async def cancelled() -> None:
        with anyio.move_on_after(0.1):
            await note("cancelled")

    with anyio.fail_after(10):  # a follower left waiting with no one to lead would hang here
        async with anyio.create_task_group() as tg, db.write():
            tg.start_soon(cancelled)
            await anyio.sleep(0.01)
            tg.start_soon(note, "kept")
            await anyio.sleep(0.3)
    async with db.read() as tx:
        rows = await tx.fetchall("SELECT payload FROM events WHERE type = 'user.note' ORDER BY seq")
    assert [row["payload"] for row in rows] == ['{"text":"kept"}']
