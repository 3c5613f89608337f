"""The ports a handler reaches the client through (progress, sampling), and what a client's cancellation does
to a running call: `cancel` tools roll back, `block` tools finish and commit."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, error_text, runtime_with
from mcp.client import ClientRequestContext

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.definitions.definition import InterruptBehavior, ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments, NoArguments, WireModel

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


class Text(WireModel):
    text: str


async def reports_progress(ctx: ToolContext, _: NoArguments) -> Text:
    for step in range(3):
        await ctx.ports.progress.report(step + 1, 3, f"step {step + 1}")
    return Text(text="done")


async def asks_the_model(ctx: ToolContext, _: NoArguments) -> Text:
    return Text(text=await ctx.ports.sampler.sample("Say hello", max_tokens=20))


class SlowInput(Arguments):
    label: str


async def slow_write(ctx: ToolContext, args: SlowInput) -> Text:
    await ctx.tx.execute("INSERT INTO probe (label) VALUES (?)", (args.label,))
    await anyio.sleep(0.6)
    return Text(text="written")


def slow(name: str, behavior: InterruptBehavior) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        title=name,
        description="Test tool: a slow write.",
        input_model=SlowInput,
        output_model=Text,
        handler=slow_write,
        read_only=False,
        interrupt_behavior=behavior,
    )


TOOLS = (
    ToolDefinition(
        name="reports_progress",
        title="Progress",
        description="Test tool: reports progress.",
        input_model=NoArguments,
        output_model=Text,
        handler=reports_progress,
    ),
    ToolDefinition(
        name="asks_the_model",
        title="Sample",
        description="Test tool: asks the client's model.",
        input_model=NoArguments,
        output_model=Text,
        handler=asks_the_model,
    ),
    slow("slow_cancel", "cancel"),
    slow("slow_block", "block"),
)


@pytest.fixture
async def rt(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with runtime_with(config, *TOOLS) as runtime:
        async with runtime.db.write() as tx:
            await tx.execute("CREATE TABLE probe (label TEXT NOT NULL)")
        yield runtime


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_reaches_the_client(rt: Runtime, connect: Connect, mode: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(rt, mode) as client:
        result = await client.call_tool("reports_progress", {}, progress_callback=on_progress)
    assert data(result) == {"text": "done"}
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_sampling_through_a_legacy_client(rt: Runtime, connect: Connect) -> None:
    async def on_sample(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        prompt = params.messages[0].content
        assert isinstance(prompt, types.TextContent)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"echo: {prompt.text}"), model="test"
        )

    async with connect(rt, "legacy", sampling_callback=on_sample) as client:
        assert data(await client.call_tool("asks_the_model", {})) == {"text": "echo: Say hello"}


@pytest.mark.parametrize("mode", ERAS)
async def test_sampling_without_a_back_channel_is_a_clear_error(rt: Runtime, connect: Connect, mode: str) -> None:
    async with connect(rt, mode) as client:
        result = await client.call_tool("asks_the_model", {})
    assert error_text(result) == "The client did not offer sampling on this connection."


async def rows(rt: Runtime) -> list[str]:
    async with rt.db.read() as tx:
        return [row["label"] for row in await tx.fetchall("SELECT label FROM probe ORDER BY label")]


async def outcome(rt: Runtime, tool: str) -> str:
    async with rt.db.read() as tx:
        value = await tx.scalar(
            f"SELECT {tx.dialect.json_text('payload', 'result')} FROM events WHERE type = 'span.completed' "
            f"AND {tx.dialect.json_text('payload', 'toolName')} = ? ORDER BY seq DESC LIMIT 1",
            (tool,),
        )
    return str(value)


@pytest.mark.parametrize(
    ("tool", "kept", "recorded"), [("slow_cancel", [], "cancelled"), ("slow_block", ["x"], "success")]
)
@pytest.mark.sqlite_only(reason="timing; a rollback mid-call on PostgreSQL: test_executor's timeout test")
async def test_client_cancellation(rt: Runtime, connect: Connect, tool: str, kept: list[str], recorded: str) -> None:
    async with connect(rt, "legacy") as client:
        with anyio.move_on_after(0.2) as scope:
            await client.call_tool(tool, {"label": "x"})
        assert scope.cancelled_caught
        await anyio.sleep(1.0)  # let a shielded handler finish on the server side
        # the connection is still usable after a cancelled call
        assert data(await client.call_tool("reports_progress", {})) == {"text": "done"}
    assert await rows(rt) == kept
    assert await outcome(rt, tool) == recorded
