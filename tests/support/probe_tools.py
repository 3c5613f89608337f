"""Test-only tools with a side effect we can count, loaded like a user's own tools (`--tools-module probe_tools`)."""

from __future__ import annotations

from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments, WireModel


class ProbeArgs(Arguments):
    label: str
    count: int = 1


class ProbeRows(WireModel):
    rows: int


async def insert_rows(ctx: ToolContext, args: ProbeArgs) -> ProbeRows:
    await ctx.tx.execute("CREATE TABLE IF NOT EXISTS probe (label TEXT NOT NULL)")
    for _ in range(args.count):
        await ctx.tx.execute("INSERT INTO probe (label) VALUES (?)", (args.label,))
    return ProbeRows(rows=int(await ctx.tx.scalar("SELECT COUNT(*) FROM probe")))


async def preview_rows(ctx: ToolContext, args: ProbeArgs) -> str:
    return f"This adds {args.count} row(s) labelled {args.label!r} to the probe table."


TOOLS = (
    ToolDefinition(
        name="probe_danger",
        title="Probe danger",
        description="Test tool: an always_ask write whose rows can be counted.",
        input_model=ProbeArgs,
        output_model=ProbeRows,
        handler=insert_rows,
        read_only=False,
        destructive=True,
        permission_policy="always_ask",
        effects=("session_write",),
        consent_preview=preview_rows,
    ),
    ToolDefinition(
        name="probe_plain",
        title="Probe plain",
        description="Test tool: an always_allow write.",
        input_model=ProbeArgs,
        output_model=ProbeRows,
        handler=insert_rows,
        read_only=False,
        effects=("session_write",),
    ),
)
