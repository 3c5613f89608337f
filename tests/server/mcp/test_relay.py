"""Change notices between two server processes' runtimes on one store: the relay, over the notices table on SQLite
and LISTEN/NOTIFY on PostgreSQL."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import data, subscribe_to_session_state
from mcp import Client

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.notices import KEEP_ROWS, Notice, PolledNotices, notice_channel

pytestmark = pytest.mark.anyio


@pytest.mark.both_backends
async def test_a_write_in_one_process_reaches_a_subscriber_of_another_once(config: ServeConfig) -> None:
    heard: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(message.params.uri)
            arrived.set()

    async with open_runtime(config) as one, open_runtime(config) as other:
        listening = Client(build_server(one, transport="memory", relay=True), mode="legacy", message_handler=on_message)
        async with listening as listener:
            session_id, uri = await subscribe_to_session_state(listener)
            async with Client(build_server(other, transport="memory", session_id=session_id, relay=True)) as writer:
                data(await writer.call_tool("memory_write", {"target": "session_state", "content": "elsewhere"}))
                with anyio.fail_after(5):
                    await arrived.wait()
            data(await listener.call_tool("memory_write", {"target": "session_state", "content": "here"}))
            await anyio.sleep(0.6)  # three polls: its own notice must not come back as a second one
    assert heard == [uri, uri]


async def test_the_notices_table_keeps_only_the_newest_rows(config: ServeConfig) -> None:
    async with open_runtime(config) as runtime:
        channel = PolledNotices(runtime.db, "origin")
        for start in range(0, KEEP_ROWS + 300, 500):
            notices = [Notice(method="notifications/resources/updated", uri=f"u{n}") for n in range(start, start + 500)]
            await channel.publish(notices)
        async with runtime.db.read() as tx:
            kept = await tx.scalar("SELECT COUNT(*) FROM notices")
    assert kept == KEEP_ROWS


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # SQLite polls a table: no connection to drop
async def test_a_dropped_listener_reconnects_and_is_logged_once(
    config: ServeConfig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="managed_tools.notices")
    notice = Notice(method="notifications/resources/list_changed")
    async with open_runtime(config) as runtime:
        sender, receiver = notice_channel(runtime.db, "sender"), notice_channel(runtime.db, "receiver")
        send, received = anyio.create_memory_object_stream[list[Notice]](100)

        async def receive() -> None:
            async for batch in receiver.arrivals():
                await send.send(batch)

        async def heard() -> list[Notice]:
            # NOTIFY reaches only a connection already listening: publish until the receiver hears
            with anyio.fail_after(20):
                while True:
                    await sender.publish([notice])
                    with anyio.move_on_after(0.5):
                        return await received.receive()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(receive)
            assert await heard() == [notice]
            for _ in range(2):  # killed twice: two pauses, each logged once (not once per retry)
                async with runtime.db.write() as tx:
                    killed = await tx.scalar(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE pid != pg_backend_pid() AND query LIKE 'LISTEN%'"
                    )
                assert killed == 1
                assert await heard() == [notice]
            tasks.cancel_scope.cancel()
    paused = [r for r in caplog.records if "paused" in r.getMessage()]
    assert len(paused) == 2
