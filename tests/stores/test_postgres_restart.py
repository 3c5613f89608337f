"""PostgreSQL restarted under two connected servers (replicas): the calls made while it is down get one clear error,
the servers keep serving once it is back, an acknowledged write survives, and change notices flow again (LISTEN
re-established). A real cluster of the test's own (tests/support/postgres_server.py), really stopped and started."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import Updates, data, error_text, subscribe_to_session_state
from mcp import Client
from support.postgres_server import SKIP_REASON, binaries, cluster

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.publishing.publish import ERROR_META_KEY
from managed_tools.server.runtime.opening import open_runtime

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def kind(result: types.CallToolResult) -> str:
    return str((result.meta or {}).get(ERROR_META_KEY, {}).get("kind"))


async def until_served(client: Client, args: dict[str, Any]) -> types.CallToolResult:
    """Call until the server answers without error (it reconnects with backoff); every refusal meanwhile must be
    the clear one."""
    with anyio.fail_after(30):
        while True:
            result = await client.call_tool("memory_write", args)
            if not result.is_error:
                return result
            assert kind(result) == "state_unavailable", result.content
            await anyio.sleep(0.2)


async def test_a_postgresql_restart_is_survived(workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    if binaries() is None:
        pytest.skip(SKIP_REASON)
    caplog.set_level(logging.INFO)
    heard = Updates()
    with cluster() as pg:
        config = ServeConfig.build(workspace=workspace, data_dir=None, database=pg.url)
        async with open_runtime(config) as one, open_runtime(config) as other:
            listening = Client(build_server(one, transport="memory", relay=True), mode="legacy", message_handler=heard)
            async with listening as listener:
                session_id, uri = await subscribe_to_session_state(listener)
                server = build_server(other, transport="memory", session_id=session_id, relay=True)
                async with Client(server) as writer:
                    data(await writer.call_tool("memory_write", {"target": "session_state", "content": "before"}))
                    with anyio.fail_after(10):
                        await heard.arrived.wait()

                    await anyio.to_thread.run_sync(pg.stop)
                    args = {"target": "session_state", "content": "during"}
                    for client in (writer, listener):
                        with anyio.fail_after(10):  # at once, not after a connect timeout per call
                            refused = await client.call_tool("memory_write", args)
                            read = await client.call_tool("memory_read", {"target": "session_state"})
                        for result in (refused, read):
                            assert kind(result) == "state_unavailable"
                            assert "cannot be reached" in error_text(result)
                            assert "try again" in error_text(result)
                            assert pg.url not in error_text(result)

                    await anyio.to_thread.run_sync(pg.start)
                    heard.expect_more()
                    await until_served(writer, {"target": "session_state", "content": "after"})
                    # A notice published before the listener is back is lost (a hint: a refresh, never state), so
                    # write until one is heard; the listener's backoff tops out at 10 s.
                    with anyio.fail_after(30):
                        while not heard.arrived.is_set():
                            data(
                                await writer.call_tool("memory_write", {"target": "session_state", "content": "after"})
                            )
                            with anyio.move_on_after(1):
                                await heard.arrived.wait()
                    state = data(await listener.call_tool("memory_read", {"target": "session_state"}))
    assert "after" in str(state) and "during" not in str(state)
    assert set(heard.uris) == {uri}
    lost = [r for r in caplog.records if "lost the connection to PostgreSQL" in r.getMessage()]
    back = [r for r in caplog.records if "PostgreSQL at" in r.getMessage() and "reachable again" in r.getMessage()]
    assert len(lost) == 2 and len(back) == 2, caplog.text  # one of each per server, not one per call
    assert "Traceback" not in caplog.text
