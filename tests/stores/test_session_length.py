"""A call costs the same in a session of 100k events as in a fresh one (issue 39 F1), retention runs while the
server runs (F14), and memory versions are kept as deltas yet read back byte for byte (F14)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Connect, data
from mcp import Client
from support.session_history import EVENTS, WAKES, bulk_history

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import events, memory, retention
from managed_tools.stores.ids import sha256_hex
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]
ROUNDS = 25
PROMOTE = "resources_promote_to_substrate"


@pytest.fixture
async def rt(config: ServeConfig) -> AsyncIterator[Runtime]:
    allowed = config.model_copy(update={"policy": {PROMOTE: "always_allow"}})
    async with open_runtime(allowed) as runtime:
        yield runtime


async def session_of(client: Client) -> str:
    return str(data(await client.call_tool("session_get_snapshot", {}))["sessionId"])


async def timed(client: Client, name: str, arguments: dict[str, Any]) -> float:
    start = time.perf_counter()
    result = await client.call_tool(name, arguments)
    elapsed = time.perf_counter() - start
    assert not result.is_error, result.content
    return elapsed


async def test_calls_cost_the_same_after_100k_events(rt: Runtime, connect: Connect) -> None:
    (rt.environment.workspace / "draft.md").write_text("# Soul\nkept short\n")
    calls: dict[str, dict[str, Any]] = {
        "memory_write": {"target": "session_state", "content": "a working note"},
        PROMOTE: {"sourcePath": "draft.md", "targetPath": "SOUL.md", "overwrite": True},
        "session_list_traces": {},
    }
    async with connect(rt) as fresh, connect(rt) as long:
        await bulk_history(rt, await session_of(fresh), WAKES)  # the same wakes listed, one event each
        await bulk_history(rt, await session_of(long))
        traces = data(await long.call_tool("session_list_traces", {"limit": 100}))
        assert traces["count"] == 100
        bulk = next(t for t in traces["traces"] if t["wakeId"].startswith("bulk-"))
        assert bulk["eventCount"] == EVENTS // WAKES and bulk["eventTypes"] == ["span.started", "span.completed"]
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(ROUNDS):  # interleaved, so the machine's load weighs on both alike
            for name, arguments in calls.items():
                for label, client in (("fresh", fresh), ("long", long)):
                    times.setdefault((name, label), []).append(await timed(client, name, arguments))
    for name in calls:
        fresh_ms = statistics.median(times[name, "fresh"]) * 1000
        long_ms = statistics.median(times[name, "long"]) * 1000
        assert long_ms <= 1.5 * fresh_ms, f"{name}: {long_ms:.2f} ms after {EVENTS} events, {fresh_ms:.2f} fresh"


async def test_an_upstream_taint_outlives_the_compaction_of_its_spans(rt: Runtime, connect: Connect) -> None:
    """The provenance rule reads session_tools, which retention leaves alone: compacting the wake that called an
    upstream server does not make the session's later writes trusted again."""
    async with connect(rt) as client:
        session = await session_of(client)
    async with rt.db.write() as tx:  # what an upstream call's completion records
        wake = str(await tx.scalar("SELECT id FROM wakes WHERE session_id = ?", (session,)))
        for kind in ("span.started", "span.completed"):
            payload = {"spanKind": "tool", "toolName": "web__fetch", "result": "success"}
            await events.append_event(tx, session, wake, kind, payload)
    assert await retention.apply(rt.db, retention.Retention(max_per_session=10)) == 0  # too few to compact
    async with rt.db.write() as tx:
        assert await retention.compact_wake(tx, wake) >= 2
        assert await events.successful_tools(tx, session) == ["session_get_snapshot", "web__fetch"]
    async with connect(rt, session_id=session) as client:
        written = data(await client.call_tool("memory_write", {"target": "session_state", "content": "after"}))
    assert written["trust"] == "untrusted"


async def test_retention_applies_while_the_server_runs(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.json").write_text(json.dumps({"retention": {"eventsMaxPerSession": 10, "everySeconds": 1}}))
    async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=data_dir)) as runtime:
        session: str | None = None
        for _ in range(3):  # three ended wakes of 8 calls: 48 tool span events
            async with connect(runtime, session_id=session) as client:
                session = await session_of(client)
                for _ in range(7):
                    await client.call_tool("memory_read", {"target": "session_state"})
        with anyio.fail_after(10):
            while True:
                async with runtime.db.read() as tx:
                    compacted = await tx.scalar("SELECT count(*) FROM events WHERE type = 'trace.compacted'")
                if int(compacted) >= 2:
                    break
                await anyio.sleep(0.2)
        async with connect(runtime, session_id=session) as client:
            traces = data(await client.call_tool("session_list_traces", {}))
    assert traces["count"] == 4  # every wake still listed, by its summary


async def test_memory_versions_are_deltas_read_back_byte_for_byte(rt: Runtime, connect: Connect) -> None:
    written: dict[str, str] = {}
    text = ""
    async with connect(rt) as client:
        session = await session_of(client)
        for n in range(100):
            mode: memory.Mode = "replace" if n in {40, 41} else "append"  # rewrites: whole versions
            chunk = f"part {n} é 🦝 " + ("x" * 9_980) + f" \t\n end {n}  "
            reply = data(
                await client.call_tool("memory_write", {"target": "session_state", "content": chunk, "mode": mode})
            )
            text = memory.combine(text, chunk, mode)
            written[reply["versionId"]] = text
        listed = data(await client.call_tool("memory_list_versions", {"target": "session_state", "limit": 100}))
        assert [v["versionId"] for v in listed["versions"]] == list(reversed(written))
        for version_id, expected in list(written.items())[::9]:
            read = data(
                await client.call_tool(
                    "memory_read_version", {"target": "session_state", "versionId": version_id, "maxChars": 200_000}
                )
            )
            assert read["content"] == expected[:200_000] and read["version"]["contentHash"] == sha256_hex(expected)
    async with rt.db.read() as tx:
        for version_id, expected in written.items():
            _, content = await memory.read_version(tx, session, "session_state", version_id)
            assert content.encode() == expected.encode()
        stored = int(await tx.scalar("SELECT sum(length(content)) FROM memory_versions WHERE scope = ?", (session,)))
        deepest = int(await tx.scalar("SELECT max(depth) FROM memory_versions WHERE scope = ?", (session,)))
    whole = sum(len(t) for t in written.values())  # about 50 million characters, kept whole
    assert stored < whole / 8 and deepest == memory.MAX_DEPTH
