"""The event index off the append path (migration 16): events are indexed in batches by the calls' records, and a
search reads the unindexed tail itself, so an event is found the moment it is appended, and an event a killed
process appended is never lost to search."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from conftest import Connect, data
from mcp import Client

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.event_search import INDEX_BATCH
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

# A process that appends one event to a session and is killed before anything else runs (no batch, no close).
KILLED_APPENDER = """
import anyio, os, signal, sys
from pathlib import Path
from managed_tools.stores import events
from managed_tools.stores.db import Database

async def main() -> None:
    db = await Database.open(Path(sys.argv[1]), local_dir=Path(sys.argv[1]).parent)
    note = {"text": sys.argv[3]}
    await db.record(lambda tx: events.append_event(tx, sys.argv[2], None, "user.note", note))
    os.kill(os.getpid(), signal.SIGKILL)

anyio.run(main)
"""


async def search(client: Client, query: str) -> list[str]:
    found = data(await client.call_tool("session_search_context", {"query": query, "includeCurrent": True}))
    return [hit["sessionId"] for hit in found["hits"]]


@pytest.mark.both_backends
async def test_an_event_is_found_right_after_it_is_appended(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        session = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        await client.call_tool("memory_write", {"target": "session_state", "content": "quokka-marmalade-7 noted"})
        assert await search(client, "quokka-marmalade-7") == [session]


async def test_the_index_fills_in_batches_and_a_search_sees_the_tail(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        for n in range(INDEX_BATCH):  # two events a call: a batch is due within it
            await client.call_tool("memory_write", {"target": "session_state", "content": f"line {n} wombat"})
        async with runtime.db.read() as tx:
            mark = int(await tx.scalar("SELECT seq FROM events_fts_mark"))
            last = int(await tx.scalar("SELECT max(seq) FROM events"))
            indexed = int(await tx.scalar("SELECT count(*) FROM events_fts WHERE events_fts MATCH 'wombat'"))
        assert 0 <= last - mark < INDEX_BATCH + 2 and indexed > 0  # indexed up to a call's record, the rest waits
        await client.call_tool("memory_write", {"target": "session_state", "content": "the last numbat"})
        assert len(await search(client, "numbat")) == 1  # in the tail, not in the index
        async with runtime.db.read() as tx:
            assert int(await tx.scalar("SELECT count(*) FROM events_fts WHERE events_fts MATCH 'numbat'")) == 0


async def test_an_event_a_killed_process_appended_is_found(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data", database=None)
    async with open_runtime(config) as runtime, connect(runtime) as client:
        session = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        command = [sys.executable, "-c", KILLED_APPENDER, str(config.state_path), session, "platypus-eclipse-42"]
        killed = await anyio.run_process(command, check=False)
        assert killed.returncode == -9, killed.stderr.decode()
        assert await search(client, "platypus-eclipse-42") == [session]
        for _ in range(INDEX_BATCH):  # the next batch indexes it too, wherever it came from
            await client.call_tool("memory_read", {"target": "session_state"})
        async with runtime.db.read() as tx:
            found = await tx.scalar("SELECT count(*) FROM events_fts WHERE events_fts MATCH '\"platypus-eclipse-42\"'")
        assert found == 1


async def test_the_mark_is_read_once_a_batch_and_another_process_moving_it_is_seen(
    runtime: Runtime, connect: Connect
) -> None:
    """Each record used to read the index's mark; now a record reads it only when the mark it last read is a
    batch behind. Another connection (another process) that indexes meanwhile moves the mark on: the next read
    sees it, and nothing is indexed twice."""
    reads: list[str] = []
    runtime.db._appender.set_trace_callback(  # type: ignore[attr-defined]
        lambda sql: reads.append(sql) if sql.startswith("SELECT seq FROM events_fts_mark") else None
    )
    async with connect(runtime) as client:
        for _ in range(INDEX_BATCH):  # two batches of events
            await client.call_tool("memory_read", {"target": "session_state"})
        assert 1 <= len(reads) <= 4, len(reads)
        async with runtime.db.write() as tx:  # another indexer, up to the last event
            last = int(await tx.scalar("SELECT max(seq) FROM events"))
            mark = int(await tx.scalar("SELECT seq FROM events_fts_mark"))
            await tx.execute(
                "INSERT INTO events_fts(rowid, agent, session, type, body) "
                "SELECT seq, agent, session, type, body FROM event_search_docs WHERE seq > ? AND seq <= ?",
                (mark, last),
            )
            await tx.execute("UPDATE events_fts_mark SET seq = ?", (last,))
        for _ in range(INDEX_BATCH):
            data(await client.call_tool("memory_read", {"target": "session_state"}))
    async with runtime.db.read() as tx:
        indexed = int(await tx.scalar("SELECT count(*) FROM events_fts"))
        mark = int(await tx.scalar("SELECT seq FROM events_fts_mark"))
        assert indexed == int(await tx.scalar("SELECT count(*) FROM event_search_docs WHERE seq <= ?", (mark,)))
