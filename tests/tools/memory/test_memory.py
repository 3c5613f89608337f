"""Versioned memory: compare-and-swap across real processes, version history, and bad input that never writes."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from conftest import ERAS, Connect, data, error_text
from mcp import Client, StdioServerParameters
from test_permissions import answer

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


async def versions(client: Client, target: str = "session_state") -> list[dict[str, Any]]:
    listed = data(await client.call_tool("memory_list_versions", {"target": target, "limit": 100}))
    return list(listed["versions"])


@pytest.mark.parametrize("mode", ERAS)
async def test_write_read_and_version_round_trip(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        first = data(await client.call_tool("memory_write", {"target": "session_state", "content": "one  \n\n"}))
        second = data(
            await client.call_tool("memory_write", {"target": "session_state", "content": "  two", "mode": "append"})
        )
        read = data(await client.call_tool("memory_read", {"target": "session_state"}))
        listed = await versions(client)
        old = data(
            await client.call_tool("memory_read_version", {"target": "session_state", "versionId": first["versionId"]})
        )
    assert first["content"] == "one\n" and first["previousVersionId"] is None
    assert second["content"] == "one\ntwo\n" and second["previousVersionId"] == first["versionId"]
    assert read["content"] == "one\ntwo\n" and read["versionId"] == second["versionId"]
    assert read["contentHash"] == second["contentHash"] and len(read["contentHash"]) == 64
    assert [v["versionId"] for v in listed] == [second["versionId"], first["versionId"]]  # newest first
    assert listed[0]["source"] == "memory_write" and listed[0]["mode"] == "append"
    assert listed[0]["preview"] == "one two" and listed[0]["sizeBytes"] == 8
    assert old["content"] == "one\n" and old["version"]["versionId"] == first["versionId"]


async def test_preconditions_refuse_stale_writes_and_name_the_latest(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        v1 = data(await client.call_tool("memory_write", {"target": "working_buffer", "content": "a"}))
        v2 = data(
            await client.call_tool(
                "memory_write",
                {"target": "working_buffer", "content": "b", "expectedVersionId": v1["versionId"]},
            )
        )
        stale = await client.call_tool(
            "memory_write", {"target": "working_buffer", "content": "c", "expectedVersionId": v1["versionId"]}
        )
        wrong_hash = await client.call_tool(
            "memory_write", {"target": "working_buffer", "content": "c", "expectedContentHash": v1["contentHash"]}
        )
        right_hash = data(
            await client.call_tool(
                "memory_write",
                {"target": "working_buffer", "content": "c", "expectedContentHash": v2["contentHash"]},
            )
        )
        fresh = await client.call_tool(
            "memory_write", {"target": "session_state", "content": "x", "expectedVersionId": "anything"}
        )
        listed = await versions(client, "working_buffer")
    assert f"expected {v1['versionId']} but latest is {v2['versionId']}" in error_text(stale)
    assert "content precondition failed" in error_text(wrong_hash)
    assert right_hash["previousVersionId"] == v2["versionId"]
    assert "but latest is none" in error_text(fresh)
    assert len(listed) == 3  # the refused writes left nothing behind


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"target": "nowhere", "content": "x"}, "field 'target'"),
        ({"target": "checkpoint", "content": "x"}, "field 'target'"),  # read-only store
        ({"target": "workspace_memory_notes", "content": "x"}, "field 'target'"),  # only through promotion
        ({"target": "session_state", "content": "   "}, "memory_write requires a non-empty content"),
        ({"target": "session_state"}, "missing required field 'content'"),
        ({"target": "session_state", "content": "x", "expectedContentHash": "abc"}, "expectedContentHash"),
        ({"target": "session_state", "content": "x" * 1_000_001}, "at most 1000000 characters"),
    ],
)
async def test_bad_writes_are_refused_and_write_nothing(
    runtime: Runtime, connect: Connect, arguments: dict[str, Any], expected: str
) -> None:
    async with connect(runtime) as client:
        result = await client.call_tool("memory_write", arguments)
        stored = await versions(client)
    assert expected in error_text(result)
    assert stored == []


async def test_ten_megabytes_is_a_clear_error(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        result = await client.call_tool("memory_write", {"target": "session_state", "content": "y" * 10_000_000})
        stored = await versions(client)
        assert data(await client.call_tool("memory_write", {"target": "session_state", "content": "ok"}))
    assert "bytes; the limit is" in error_text(result)
    assert stored == []


async def test_reads_of_every_store_and_unknown_versions(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        listed = data(await client.call_tool("memory_list", {}))
        reads = {s["target"]: data(await client.call_tool("memory_read", {"target": s["target"]}))
                 for s in listed["stores"]}  # fmt: skip
        unknown = await client.call_tool("memory_read_version", {"target": "session_state", "versionId": "nope"})
        unknown_target = await client.call_tool("memory_read", {"target": "secrets"})
    assert listed["count"] == 6
    writers = {s["target"]: s["writtenBy"] for s in listed["stores"]}
    assert writers["workspace_memory_notes"] == "memory_promote_note" and writers["checkpoint"] is None
    assert reads["session_state"]["empty"] is True and reads["session_state"]["versionId"] is None
    assert '"checkpoint"' in reads["checkpoint"]["content"] and reads["checkpoint"]["format"] == "json"
    shell_state = json.loads(reads["shell_state"]["content"])["shellState"]
    assert shell_state["cwd"] == "/workspace" and shell_state["persistentShell"] is None
    assert "No managed memory notes yet" in reads["workspace_memory"]["content"]
    assert "No managed memory version exists for versionId=nope" in error_text(unknown)
    assert "field 'target'" in error_text(unknown_target)


@pytest.mark.parametrize("mode", ERAS)
async def test_learnings_promoted_into_workspace_memory(runtime: Runtime, connect: Connect, mode: str) -> None:
    asked: list[str] = []
    lesson = {"kind": "lesson", "title": "Run the linter", "detail": "It catches typos.", "promoteToMemory": True}
    async with connect(runtime, mode) as client:  # F9: no way to ask a person, so no write to the shared MEMORY.md
        blocked = await client.call_tool("learning_record", lesson)
        unasked = data(await client.call_tool("memory_read", {"target": "workspace_memory"}))["content"]
        recorded = data(await client.call_tool("learning_record", {**lesson, "promoteToMemory": False}))
    async with connect(runtime, mode, elicitation_callback=answer("decline")) as client:
        declined = await client.call_tool("learning_record", lesson)
    async with connect(runtime, mode, elicitation_callback=answer("accept", {"approve": True}, asked)) as client:
        kept = data(await client.call_tool("learning_record", lesson))
        await client.call_tool("learning_record", {"kind": "error", "title": "Flaky", "detail": "retry"})
        too_long = await client.call_tool("learning_record", {"kind": "lesson", "title": "t" * 121, "detail": "d"})
        listed = data(await client.call_tool("learning_list", {"limit": 5}))
        memory_md = data(await client.call_tool("memory_read", {"target": "workspace_memory"}))["content"]
    assert "needs a person's approval" in error_text(blocked) and "Run the linter" not in unasked
    assert recorded["workspaceMemoryUri"] is None  # recording alone asks nobody
    assert "denied confirmation for learning_record" in error_text(declined)
    assert len(asked) == 1 and "shared MEMORY.md" in asked[0] and "Run the linter — It catches typos." in asked[0]
    assert kept["workspaceMemoryUri"] == "managed-tools://agent/memory/workspace_memory"
    assert [item["title"] for item in listed["learnings"]] == ["Run the linter", "Run the linter", "Flaky"]
    assert memory_md.count("- [lesson] Run the linter — It catches typos.") == 1 and "Flaky" not in memory_md
    assert "at most 120 characters" in error_text(too_long)


async def test_learning_promotion_is_outcome_gated(runtime: Runtime, connect: Connect) -> None:
    asked: list[str] = []
    async with connect(runtime, "legacy", elicitation_callback=answer("accept", {"approve": True}, asked)) as client:
        await client.call_tool("outcome_define", {"title": "ship it", "successCriteria": ["tests pass"]})
        closed = await client.call_tool(
            "learning_record", {"kind": "lesson", "title": "Gate", "detail": "closed", "promoteToMemory": True}
        )
        memory_md = data(await client.call_tool("memory_read", {"target": "workspace_memory"}))["content"]
    assert "requires outcome_evaluate to return status=pass" in error_text(closed)
    assert asked == [] and "Gate" not in memory_md  # refused before a person was asked


# ---- racing writers, each a real server process -----------------------------------------------------------


@asynccontextmanager
async def server_process(config: ServeConfig, session_id: str | None = None) -> AsyncIterator[Client]:
    """A server process on the test's state (its SQLite file, or its PostgreSQL database)."""
    resume = [] if session_id is None else ["--session", session_id]
    database = [] if config.database is None else ["--database", config.database]
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "managed_tools.server", "serve", "--workspace", str(config.workspace), *resume, *database],
        env=dict(os.environ),
    )
    async with Client(params) as client:
        yield client


async def _session_and_base(config: ServeConfig) -> tuple[str, str]:
    async with server_process(config) as client:
        base = data(await client.call_tool("memory_write", {"target": "session_state", "content": "base"}))
    return base["sessionId"], base["versionId"]


async def test_racing_processes_on_one_version_exactly_one_wins(config: ServeConfig) -> None:
    session_id, base = await _session_and_base(config)
    outcomes: list[str] = []
    ready = anyio.Event()
    connected = 0

    async def writer(n: int) -> None:
        nonlocal connected
        async with server_process(config, session_id) as client:
            connected += 1
            if connected == 6:
                ready.set()
            await ready.wait()
            result = await client.call_tool(
                "memory_write", {"target": "session_state", "content": f"writer {n}", "expectedVersionId": base}
            )
            outcomes.append("won" if not result.is_error else error_text(result))

    async with anyio.create_task_group() as tg:
        for n in range(6):
            tg.start_soon(writer, n)
    assert outcomes.count("won") == 1
    losers = [o for o in outcomes if o != "won"]
    assert len(losers) == 5 and all("version precondition failed" in o for o in losers)
    async with server_process(config, session_id) as client:
        history = await versions(client)
        current = data(await client.call_tool("memory_read", {"target": "session_state"}))
    assert len(history) == 2 and history[0]["versionId"] == current["versionId"]
    assert all(f"but latest is {history[0]['versionId']}" in o for o in losers)


async def test_retrying_writers_lose_nothing(config: ServeConfig) -> None:
    """4 processes, each appending 5 lines by compare-and-swap, retrying when another won: nothing is lost."""
    session_id, _ = await _session_and_base(config)

    async def writer(n: int) -> None:
        async with server_process(config, session_id) as client:
            for i in range(5):
                while True:
                    now = data(await client.call_tool("memory_read", {"target": "session_state"}))
                    result = await client.call_tool(
                        "memory_write",
                        {
                            "target": "session_state",
                            "content": f"line {n}-{i}",
                            "mode": "append",
                            "expectedVersionId": now["versionId"],
                        },
                    )
                    if not result.is_error:
                        break
                    assert "version precondition failed" in error_text(result)

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(writer, n)
    async with server_process(config, session_id) as client:
        content = data(await client.call_tool("memory_read", {"target": "session_state"}))["content"]
        history = await versions(client)
    lines = content.splitlines()
    assert sorted(lines[1:]) == sorted(f"line {n}-{i}" for n in range(4) for i in range(5))
    assert len(history) == 21  # the base plus one version per successful write: none lost
