"""The commands that run once in a new process: read-only `bash` (an allowlisted program, no shell, confined to
read) and permission-gated `shell_run` (`$SHELL -c` in a writable mount), with their declarations.
"""

from __future__ import annotations

from subprocess import SubprocessError
from typing import Annotated

from pydantic import Field

from managed_tools.sandbox.egress import Egress
from managed_tools.sandbox.spawn import Domain
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.what_runs import WhatRuns
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.models import Arguments, NoNul
from managed_tools.tools.shell import git
from managed_tools.tools.shell import posture as core
from managed_tools.tools.shell.argv import plan as bash_plan
from managed_tools.tools.shell.binds import bind
from managed_tools.tools.shell.jobs import (
    HANDLE_AFTER_MS,
    CommandResult,
    approved,
    command_result,
    contained,
    follow,
    new_job,
    recorder,
    shell_state,
    writable_dir,
)
from managed_tools.tools.shell.runner import Job, shell_argv, start_process
from managed_tools.tools.shell.virtual_paths import map_virtual_paths

MAX_COMMAND_CHARS = 20_000
TimeoutMs = Annotated[int, Field(ge=100, le=600_000, description="Kill its process group after this long.")]
BashTimeoutMs = Annotated[int, Field(ge=100, le=60_000, description="Kill the program after this long.")]
MaxChars = Annotated[int, Field(ge=200, le=40_000, description="Most characters kept per stream.")]
WaitMs = Annotated[int, Field(ge=0, le=HANDLE_AFTER_MS, description="After this long, return its id for shell_wait.")]
CommandText = Annotated[str, Field(min_length=1, max_length=MAX_COMMAND_CHARS), NoNul]


# ---- bash ----------------------------------------------------------------------------------------------------


class BashInput(Arguments):
    command: str = Field(min_length=1, max_length=64, description="A bare allowlisted program name (ls, cat, ...).")
    args: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(max_length=64)] = Field(
        default_factory=list, description="Its arguments, one per item; no shell parses them."
    )
    cwd: str | None = Field(default=None, description="Defaults to the session's shell cwd.")
    timeout_ms: BashTimeoutMs = 15_000
    max_output_chars: MaxChars = 12_000


async def bash(ctx: ToolContext, args: BashInput) -> CommandResult:
    state = await shell_state(ctx)
    guard, confine = ctx.runtime.guard, ctx.runtime.confinement.read_only
    if args.command == "git":
        planned = await git.plan(guard, confine, args.args, args.cwd or state.cwd)
    else:
        planned = bash_plan(guard, args.command, args.args, args.cwd or state.cwd)
    cwd = planned.cwd.virtual
    job = await new_job(ctx, "bash", args.command, args=args.args, cwd=cwd, cap=args.max_output_chars)
    await _launch(
        ctx,
        job,
        planned.argv,
        cwd=str(planned.cwd.host),
        env=planned.env,
        timeout_ms=args.timeout_ms,
        confine=confine,
    )
    await follow(ctx, job, args.timeout_ms / 1000 + 5, kill_on_cancel=True)
    return command_result(ctx.runtime, job)


async def _launch(
    ctx: ToolContext,
    job: Job,
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    timeout_ms: int,
    confine: Domain | None,
    egress: Egress | None = None,
) -> None:
    record = recorder(ctx.runtime)
    try:
        await start_process(job, argv, cwd=cwd, env=env, limit_s=timeout_ms / 1000, on_done=record, confine=confine,
                            egress=egress)  # fmt: skip
    except (OSError, SubprocessError) as exc:  # SubprocessError: the child could not confine itself; no exec
        job.stderr.feed(f"could not start: {getattr(exc, 'strerror', None) or exc}".encode())
        job.finish("completed", 127)
        await record(job)


# ---- shell_run -----------------------------------------------------------------------------------------------


class RunInput(Arguments):
    command: CommandText = Field(description="Run once with `$SHELL -c` (no login shell, no rc file).")
    cwd: str | None = Field(default=None, description="A directory in a writable mount; defaults to the shell cwd.")
    timeout_ms: TimeoutMs = 15_000
    max_output_chars: MaxChars = 12_000
    wait_ms: WaitMs = HANDLE_AFTER_MS


async def _runs_once(ctx: ToolContext, args: RunInput) -> WhatRuns:
    map_virtual_paths(ctx.runtime.guard, args.command)  # a path it would refuse is refused before anyone is asked
    state = await shell_state(ctx)
    where = writable_dir(ctx, args.cwd if args.cwd is not None else state.cwd)
    runner = f"once by {shell_argv()[0]} in a new process"
    what = WhatRuns(runner=runner, command=args.command, cwd=where.virtual, env=state.env)
    return await bind(ctx.runtime.guard, ctx.runtime.confinement.shell_path, what)


class RunResult(CommandResult):
    rewrote_virtual_paths: bool = Field(
        description="Whether /workspace/... paths in the command were mapped to the real mounts before it ran."
    )


async def shell_run(ctx: ToolContext, args: RunInput) -> RunResult:
    what = approved(ctx, await _runs_once(ctx, args))
    where = writable_dir(ctx, what.cwd)
    env = core.base_env(ctx.runtime, ctx.session_id, where.virtual, what.env)
    job = await new_job(ctx, "shell", args.command, args=[], cwd=where.virtual, cap=args.max_output_chars)
    mapped = map_virtual_paths(ctx.runtime.guard, args.command)
    argv = [*shell_argv(), "-c", mapped]
    confinement = ctx.runtime.confinement
    await _launch(ctx, job, argv, cwd=str(where.host), env=env, timeout_ms=args.timeout_ms,
                  confine=confinement.shell, egress=confinement.egress)  # fmt: skip
    await follow(ctx, job, args.wait_ms / 1000, kill_on_cancel=True)
    ran = command_result(ctx.runtime, job)
    return RunResult(**dict(ran), rewrote_virtual_paths=mapped != args.command)


DEFINITIONS = (
    ToolDefinition(
        name="bash",
        title="Run a read-only command",
        description="Run one allowlisted read-only program (pwd, env, ls, cat, head, tail, wc, basename, dirname, "
        "realpath, stat, git status/diff/log/show/blame/ls-files/rev-parse/branch) without a shell, in one mount.",
        input_model=BashInput,
        output_model=CommandResult,
        handler=bash,
        scans_secrets=True,  # commands may carry a credential, output may print one
        effects=("resource_read", "sandbox_execute"),
        read_only=True,
        own_transactions=True,
        interrupt_behavior="cancel",
        timeout_seconds=70.0,
        examples=(ToolExample(description="List the workspace", input={"command": "ls", "args": ["-la"]}),),
    ),
    ToolDefinition(
        name="shell_run",
        title="Run a shell command",
        description="Run a shell command once in a writable mount after a person approves the exact command and"
        " cwd; /workspace/... paths mapped; long ones return a handle.",
        input_model=RunInput,
        output_model=RunResult,
        handler=shell_run,
        scans_secrets=True,  # commands may carry a credential, output may print one
        run_context=_runs_once,
        contained=contained,
        permission_policy="always_ask",
        effects=("sandbox_execute", "resource_write"),
        read_only=False,
        destructive=True,
        open_world=True,
        own_transactions=True,
        interrupt_behavior="cancel",
        timeout_seconds=55.0,
        examples=(ToolExample(description="Run the tests", input={"command": "make test", "timeoutMs": 120000}),),
    ),
)
