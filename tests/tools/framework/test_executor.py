"""The executor's pipeline with test-only tools registered through the registry: bad arguments, failing
handlers, refusals and timeouts each give a clear error result, leave no partial rows, and are audited."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

import anyio
import pytest
from anyio.abc import Process
from conftest import ERAS, Connect, data, error_text, runtime_with
from mcp_types import RequestParamsMeta
from pydantic import Field

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.stores.db.postgres import WRITE_LOCK
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, NoArguments, WireModel

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


class ProbeInput(Arguments):
    label: Annotated[str, Field(min_length=1, max_length=100)]
    count: int = 1
    fail: bool = False
    crash: bool = False
    tags: list[str] = Field(default_factory=list)


class ProbeOutput(WireModel):
    rows: int


async def probe_write(ctx: ToolContext, args: ProbeInput) -> ProbeOutput:
    for _ in range(args.count):
        await ctx.tx.execute("INSERT INTO probe (label) VALUES (?)", (args.label,))
    if args.fail:
        raise ToolError("probe refused after writing; nothing should remain")
    if args.crash:
        raise RuntimeError("secret-detail-that-must-not-leak")
    return ProbeOutput(rows=int(await ctx.tx.scalar("SELECT COUNT(*) FROM probe")))


async def probe_slow(ctx: ToolContext, _: NoArguments) -> ProbeOutput:
    await ctx.tx.execute("INSERT INTO probe (label) VALUES ('slow')")
    await anyio.sleep(5)
    return ProbeOutput(rows=1)


async def probe_wrong_output(ctx: ToolContext, _: NoArguments) -> WireModel:
    return NoArguments()


PROBES = (
    ToolDefinition(
        name="probe_write",
        title="Probe write",
        description="Test tool: insert rows into the probe table.",
        input_model=ProbeInput,
        output_model=ProbeOutput,
        handler=probe_write,
        read_only=False,
        effects=("session_write",),
    ),
    ToolDefinition(
        name="probe_ask",
        title="Probe ask",
        description="Test tool: an always_ask write.",
        input_model=ProbeInput,
        output_model=ProbeOutput,
        handler=probe_write,
        read_only=False,
        permission_policy="always_ask",
    ),
    ToolDefinition(
        name="probe_slow",
        title="Probe slow",
        description="Test tool: never finishes in time.",
        input_model=NoArguments,
        output_model=ProbeOutput,
        handler=probe_slow,
        read_only=False,
        timeout_seconds=0.3,
    ),
    ToolDefinition(
        name="probe_wrong_output",
        title="Probe wrong output",
        description="Test tool: returns the wrong model.",
        input_model=NoArguments,
        output_model=ProbeOutput,
        handler=probe_wrong_output,
    ),
)


@pytest.fixture
async def probed(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with runtime_with(config, *PROBES) as rt:
        async with rt.db.write() as tx:
            await tx.execute("CREATE TABLE IF NOT EXISTS probe (label TEXT NOT NULL)")
        yield rt


async def probe_rows(rt: Runtime) -> int:
    async with rt.db.read() as tx:
        return int(await tx.scalar("SELECT COUNT(*) FROM probe"))


async def completions(rt: Runtime, tool: str) -> list[dict[str, object]]:
    async with rt.db.read() as tx:
        rows = await tx.fetchall(
            "SELECT payload FROM events WHERE type = 'span.completed' "
            f"AND {tx.dialect.json_text('payload', 'toolName')} = ? ORDER BY seq",
            (tool,),
        )
    return [json.loads(row["payload"]) for row in rows]


@pytest.mark.parametrize("mode", ERAS)
async def test_successful_write_commits_with_its_span(probed: Runtime, connect: Connect, mode: str) -> None:
    async with connect(probed, mode) as client:
        assert data(await client.call_tool("probe_write", {"label": "a", "count": 3})) == {"rows": 3}
    assert await probe_rows(probed) == 3
    assert [c["result"] for c in await completions(probed, "probe_write")] == ["success"]


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("failure", ["fail", "crash"])
async def test_failing_handler_leaves_no_partial_rows(
    probed: Runtime, connect: Connect, mode: str, failure: str
) -> None:
    async with connect(probed, mode) as client:
        result = await client.call_tool("probe_write", {"label": "x", "count": 5, failure: True})
        text = error_text(result)
        # the server keeps serving
        assert data(await client.call_tool("probe_write", {"label": "ok"})) == {"rows": 1}
    if failure == "fail":
        assert text == "probe refused after writing; nothing should remain"
        assert (result.meta or {})["managed-tools/error"]["kind"] == "tool_error"
    else:
        assert "failed unexpectedly (RuntimeError)" in text and "nothing it started was kept" in text
        assert "secret-detail" not in text
    assert await probe_rows(probed) == 1
    done = await completions(probed, "probe_write")
    assert [c["result"] for c in done] == ["error", "success"]
    assert "secret-detail" not in str(done)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "missing required field 'label'"),
        ({"label": "a", "count": "three"}, "field 'count': Input should be a valid integer"),
        ({"label": "a", "extra": 1}, "unexpected field 'extra' (accepted: label, count, fail, crash, tags)"),
        ({"label": ""}, "field 'label': String should have at least 1 character"),
        ({"label": "a", "tags": "not-a-list"}, "field 'tags': Input should be a valid list"),
        ({"label": "a", "tags": [1]}, "field 'tags.0': Input should be a valid string"),
        ({"label": None}, "field 'label': Input should be a valid string"),
    ],
)
async def test_argument_errors_name_the_field(
    probed: Runtime, connect: Connect, arguments: dict[str, object], expected: str
) -> None:
    async with connect(probed) as client:
        result = await client.call_tool("probe_write", arguments)
    assert expected in error_text(result)
    assert error_text(result).startswith("Invalid arguments for probe_write:")
    assert (result.meta or {})["managed-tools/error"]["kind"] == "invalid_arguments"
    assert await probe_rows(probed) == 0


async def test_oversized_arguments_are_refused_before_parsing(probed: Runtime, connect: Connect) -> None:
    async with connect(probed) as client:
        result = await client.call_tool("probe_write", {"label": "a", "tags": ["x" * 1024] * 1100})
    assert "bytes; the limit is 1048576" in error_text(result)
    assert await probe_rows(probed) == 0


async def test_snake_case_names_are_not_accepted(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        result = await client.call_tool("session_get_events", {"session_id": "x"})
    assert "unexpected field 'session_id'" in error_text(result)


@pytest.mark.parametrize("mode", ERAS)
async def test_always_ask_fails_closed_without_consent(probed: Runtime, connect: Connect, mode: str) -> None:
    async with connect(probed, mode) as client:
        result = await client.call_tool("probe_ask", {"label": "danger"})
    assert "needs a person's approval" in error_text(result)
    assert (result.meta or {})["managed-tools/error"] == {"kind": "permission", "status": "blocked"}
    assert await probe_rows(probed) == 0
    assert [c["result"] for c in await completions(probed, "probe_ask")] == ["blocked"]


async def test_timeout_rolls_back_and_reports(probed: Runtime, connect: Connect) -> None:
    async with connect(probed) as client:
        with anyio.fail_after(3):
            result = await client.call_tool("probe_slow", {})
    assert "did not finish within 0.3 s" in error_text(result)
    assert await probe_rows(probed) == 0
    assert [c["result"] for c in await completions(probed, "probe_slow")] == ["error"]


async def test_handler_returning_the_wrong_model_is_an_error(probed: Runtime, connect: Connect) -> None:
    async with connect(probed) as client:
        result = await client.call_tool("probe_wrong_output", {})
    assert "failed unexpectedly (TypeError)" in error_text(result)


LOCKER = textwrap.dedent(
    r"""
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    sys.stdout.write("locked\n")
    sys.stdout.flush()
    time.sleep(float(sys.argv[2]))
    conn.execute("INSERT INTO probe (label) VALUES ('other process')")
    conn.execute("COMMIT")
    """
)
LOCKER_POSTGRES = textwrap.dedent(
    rf"""
    import asyncio, asyncpg, sys
    async def main():
        conn = await asyncpg.connect(sys.argv[1])
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock({WRITE_LOCK})")
            sys.stdout.write("locked\n")
            sys.stdout.flush()
            await asyncio.sleep(float(sys.argv[2]))
            await conn.execute("INSERT INTO probe (label) VALUES ('other process')")
        await conn.close()
    asyncio.run(main())
    """
)


async def hold_lock(rt: Runtime, seconds: float) -> Process:
    """Another process takes the write lock (PostgreSQL: the advisory lock every writer queues on) and keeps it."""
    locker = LOCKER if rt.db.dialect.name == "sqlite" else LOCKER_POSTGRES
    proc = await anyio.open_process([sys.executable, "-c", locker, rt.db.key, str(seconds)])
    assert proc.stdout is not None
    assert (await proc.stdout.receive()).startswith(b"locked")  # a pipe may deliver the line in pieces
    return proc


async def test_database_locked_by_another_process_gives_a_clear_error(
    workspace: Path, connect: Connect, database_option: str | None
) -> None:
    config = ServeConfig.build(
        workspace=workspace, data_dir=None, agent="default", database=database_option
    ).model_copy(update={"busy_timeout_ms": 200})
    async with runtime_with(config, *PROBES) as rt:
        async with rt.db.write() as tx:
            await tx.execute("CREATE TABLE probe (label TEXT NOT NULL)")
        async with connect(rt) as client:
            proc = await hold_lock(rt, 1.5)
            busy = await client.call_tool("probe_write", {"label": "mine"})
            await proc.wait()
            ok = data(await client.call_tool("probe_write", {"label": "mine"}))
    assert "locked by another process" in error_text(busy)
    assert (busy.meta or {})["managed-tools/error"]["kind"] == "busy"
    assert ok == {"rows": 2}  # the other process's row, then ours; the refused call wrote nothing


async def test_a_short_lock_is_waited_out(probed: Runtime, connect: Connect) -> None:
    async with connect(probed) as client:
        proc = await hold_lock(probed, 0.5)
        result = data(await client.call_tool("probe_write", {"label": "mine"}))
        await proc.wait()
    assert result == {"rows": 2}


async def test_a_client_deadline_shortens_the_timeout(probed: Runtime, connect: Connect) -> None:
    expired: RequestParamsMeta = {"managed-tools/timeoutMs": 0}  # type: ignore[typeddict-unknown-key]
    generous: RequestParamsMeta = {"managed-tools/timeoutMs": 10_000_000}  # type: ignore[typeddict-unknown-key]
    async with connect(probed) as client:
        late = await client.call_tool("probe_write", {"label": "a"}, meta=expired)
        ok = await client.call_tool("probe_write", {"label": "a"}, meta=generous)
    assert "deadline for probe_write had already passed; it was not run" in error_text(late)
    assert data(ok) == {"rows": 1}  # a long deadline cannot lengthen the tool's own timeout, nor break it
