"""Reading the shell: `shell_describe` (the posture), `shell_history`, one command by id, the last output, and
`shell_wait`, which follows a running command without owning it (a cancelled wait leaves it running).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from managed_tools.stores import shell as store
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import scoped_session_id
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, Formatted, NextTool, SessionId, WireModel
from managed_tools.tools.shell import posture as core
from managed_tools.tools.shell.jobs import HANDLE_AFTER_MS, CommandResult, command_result, follow, stored_result

CommandId = Annotated[str, Field(pattern=r"^[0-9a-f]{16}$", description="A command id from a shell result.")]


class ScopedInput(Arguments):
    session_id: SessionId | None = None


async def shell_describe(ctx: ToolContext, args: ScopedInput) -> core.ShellPosture:
    record_id = await scoped_session_id(ctx, args.session_id)
    return await core.posture(ctx.runtime, ctx.tx, record_id)


class HistoryInput(ScopedInput, Formatted):
    limit: Annotated[int, Field(ge=1, le=50)] = 5


class HistoryOutput(WireModel):
    session_id: str
    count: int
    commands: list[core.CommandView]
    busy_plan: core.BusyPlan | None
    recovery_plan: NextTool | None
    next_step: NextTool | None


async def shell_history(ctx: ToolContext, args: HistoryInput) -> HistoryOutput:
    record_id = await scoped_session_id(ctx, args.session_id)
    posture = await core.posture(ctx.runtime, ctx.tx, record_id)
    views = [core.record_view(ctx.runtime, r) for r in await store.recent_commands(ctx.tx, record_id, args.limit)]
    return HistoryOutput(
        session_id=record_id,
        count=len(views),
        commands=views,
        busy_plan=posture.busy_plan,
        recovery_plan=posture.recovery_plan,
        next_step=posture.next_step,
    )


class ReadCommandInput(ScopedInput):
    command_id: CommandId


async def _read(ctx: ToolContext, session_id: str, command_id: str) -> CommandResult:
    job = core.live_job(ctx.runtime, session_id, command_id)
    if job is not None:
        return command_result(ctx.runtime, job)
    record = await store.get_command(ctx.tx, session_id, command_id)
    if record is None:
        raise ToolError(f"No command {command_id} in this session; shell_history lists the recent ones.")
    return stored_result(record, core.record_view(ctx.runtime, record))


async def shell_read_command(ctx: ToolContext, args: ReadCommandInput) -> CommandResult:
    record_id = await scoped_session_id(ctx, args.session_id)
    return await _read(ctx, record_id, args.command_id)


class LastOutput(WireModel):
    session_id: str
    last_command: CommandResult | None
    live_command: core.CommandView | None
    busy_plan: core.BusyPlan | None
    recovery_plan: NextTool | None
    next_step: NextTool | None


async def shell_read_last_output(ctx: ToolContext, args: ScopedInput) -> LastOutput:
    record_id = await scoped_session_id(ctx, args.session_id)
    posture = await core.posture(ctx.runtime, ctx.tx, record_id)
    last = None
    if posture.last_command is not None:
        last = await _read(ctx, record_id, posture.last_command.command_id)
    return LastOutput(
        session_id=record_id,
        last_command=last,
        live_command=posture.running_commands[0] if posture.running_commands else None,
        busy_plan=posture.busy_plan,
        recovery_plan=posture.recovery_plan,
        next_step=posture.next_step,
    )


class WaitInput(Arguments):
    command_id: CommandId | None = Field(default=None, description="Defaults to the command running now.")
    timeout_ms: Annotated[int, Field(ge=0, le=HANDLE_AFTER_MS)] = 1000


class WaitOutput(WireModel):
    state: Literal["idle", "running", "completed", "error"]
    command: CommandResult | None


async def shell_wait(ctx: ToolContext, args: WaitInput) -> WaitOutput:
    command_id = args.command_id
    if command_id is None:
        running = core.running_jobs(ctx.runtime, ctx.session_id)
        if not running:
            return WaitOutput(state="idle", command=None)
        command_id = running[0].id
    job = core.live_job(ctx.runtime, ctx.session_id, command_id)
    if job is not None:
        # Waiting is not owning: a cancelled wait leaves the command running.
        await follow(ctx, job, args.timeout_ms / 1000, kill_on_cancel=False)
        result = command_result(ctx.runtime, job)
    else:
        async with ctx.runtime.db.read() as tx:
            found = await store.get_command(tx, ctx.session_id, command_id)
            if found is None:
                raise ToolError(f"No command {command_id} in this session; shell_history lists the recent ones.")
            result = stored_result(found, core.record_view(ctx.runtime, found))
    if result.status == "running":
        return WaitOutput(state="running", command=result)
    return WaitOutput(state="completed" if result.status == "completed" else "error", command=result)


DEFINITIONS = (
    ToolDefinition(
        name="shell_describe",
        title="Describe the shell",
        description="The session's shell: live state, busy, current command, cwd, env keys, busy / recovery plans.",
        input_model=ScopedInput,
        output_model=core.ShellPosture,
        handler=shell_describe,
        effects=("memory_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="shell_history",
        title="Shell command history",
        description="The session's recent shell commands, newest first, with exit codes and output previews.",
        input_model=HistoryInput,
        output_model=HistoryOutput,
        handler=shell_history,
        scans_secrets=True,  # commands may carry a credential, output may print one
        effects=("memory_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="shell_read_command",
        title="Read a shell command",
        description="One command by id: its status and its output so far (running) or in full (done).",
        input_model=ReadCommandInput,
        output_model=CommandResult,
        handler=shell_read_command,
        scans_secrets=True,  # commands may carry a credential, output may print one
        effects=("memory_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="shell_read_last_output",
        title="Read the last shell output",
        description="The last finished command's output, and the running command if the shell is busy.",
        input_model=ScopedInput,
        output_model=LastOutput,
        handler=shell_read_last_output,
        scans_secrets=True,  # commands may carry a credential, output may print one
        effects=("memory_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="shell_wait",
        title="Wait for a shell command",
        description="Wait up to timeoutMs for a running command (default: the current one): idle, running, "
        "completed or error.",
        input_model=WaitInput,
        output_model=WaitOutput,
        handler=shell_wait,
        scans_secrets=True,  # commands may carry a credential, output may print one
        effects=("memory_read",),
        own_transactions=True,
        interrupt_behavior="cancel",
        timeout_seconds=55.0,
    ),
)
