"""The shell hand (issue 6; reference §2g, §7): read-only `bash`, permission-gated `shell_run` / `shell_exec`,
the session's persistent shell, and its history.

The tools that wait on a process declare `own_transactions`: they read and write SQLite in short transactions of
their own and hold none while the process runs, so a 45-second command never blocks another writer.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from subprocess import SubprocessError
from typing import Annotated, Any, Literal

import anyio
from pydantic import Field

from managed_tools.stores import shell as store
from managed_tools.stores.db import Tx
from managed_tools.stores.ids import utc_now
from managed_tools.stores.paths import PathError, Resolved
from managed_tools.stores.spawn import Domain
from managed_tools.tools.context import Runtime, ToolContext
from managed_tools.tools.definition import ToolDefinition, ToolExample
from managed_tools.tools.errors import ToolError
from managed_tools.tools.models import Arguments, NextTool, NoArguments, SessionId, WireModel
from managed_tools.tools.scope import scoped_session
from managed_tools.tools.shell import posture as core
from managed_tools.tools.shell.argv import FIXED_ENV
from managed_tools.tools.shell.argv import plan as bash_plan
from managed_tools.tools.shell.runner import (
    TRANSIENT_KEYS,
    Job,
    OnDone,
    Output,
    PersistentShell,
    shell_argv,
    start_process,
)
from managed_tools.tools.what_runs import WhatRuns

log = logging.getLogger("managed_tools.shell")

HANDLE_AFTER_MS = 45_000  # a call never holds the client much longer than this: it returns a handle instead
MAX_COMMAND_CHARS = 20_000
TimeoutMs = Annotated[int, Field(ge=100, le=600_000, description="Kill the command (its whole process group) after "
                                 "this long.")]  # fmt: skip
BashTimeoutMs = Annotated[int, Field(ge=100, le=60_000, description="Kill the program after this long.")]
MaxChars = Annotated[int, Field(ge=200, le=40_000, description="Keep at most this many characters of each stream.")]
WaitMs = Annotated[int, Field(ge=0, le=HANDLE_AFTER_MS, description="Return a running handle (the command id) if the "
                              "command is still running after this long; follow it with shell_wait.")]  # fmt: skip
CommandText = Annotated[str, Field(min_length=1, max_length=MAX_COMMAND_CHARS)]
CommandId = Annotated[str, Field(pattern=r"^[0-9a-f]{16}$", description="A command id from a shell result.")]


# ---- results -------------------------------------------------------------------------------------------------


class CommandResult(WireModel):
    ok: bool
    command_id: str
    kind: store.CommandKind
    status: store.CommandStatus
    command: str
    args: list[str]
    cwd: str
    exit_code: int | None
    timed_out: bool
    duration_ms: float | None
    stdout: str
    stderr: str
    text: str
    truncated: bool
    next_step: NextTool | None


def _result(runtime: Runtime, job: Job) -> CommandResult:
    out, cut_out = job.stdout.text()
    err, cut_err = job.stderr.text()
    out, err = core.virtualize(runtime.guard, out), core.virtualize(runtime.guard, err)
    running = not job.done.is_set()
    step = None
    if running:
        step = NextTool(
            tool="shell_wait",
            args={"commandId": job.id, "timeoutMs": 10_000},
            rationale="Still running: wait for it (or read its progress with shell_read_command).",
        )
    return CommandResult(
        ok=job.status == "completed" and job.exit_code == 0,
        command_id=job.id,
        kind=job.kind,
        status=job.status,
        command=job.command,
        args=job.args,
        cwd=job.cwd,
        exit_code=job.exit_code,
        timed_out=job.status == "timed_out",
        duration_ms=job.elapsed_ms() if running else job.duration_ms,
        stdout=out,
        stderr=err,
        text=out + (("\n" if out and not out.endswith("\n") else "") + err if err else ""),
        truncated=cut_out or cut_err,
        next_step=step,
    )


def _stored_result(record: store.CommandRecord, view: core.CommandView) -> CommandResult:
    return CommandResult(
        ok=view.status == "completed" and record.exit_code == 0,
        command_id=record.id,
        kind=record.kind,
        status=view.status,
        command=record.command,
        args=record.args,
        cwd=record.cwd,
        exit_code=record.exit_code,
        timed_out=record.status == "timed_out",
        duration_ms=record.duration_ms,
        stdout=record.stdout,
        stderr=record.stderr,
        text=record.stdout + record.stderr,
        truncated=record.truncated,
        next_step=None,
    )


# ---- running a job -------------------------------------------------------------------------------------------


async def _new_job(
    ctx: ToolContext, kind: store.CommandKind, command: str, *, args: list[str], cwd: str, cap: int
) -> Job:
    started = utc_now()
    async with ctx.runtime.db.write() as tx:
        cid = await store.start_command(tx, ctx.session_id, kind, command, args=args, cwd=cwd, started_at=started)
    job = Job(cid, ctx.session_id, kind, command, args, cwd, started, Output(cap), Output(cap))
    core.track(ctx.runtime, job)
    return job


After = Callable[[Tx, Job], Awaitable[None]]


def _recorder(runtime: Runtime, after: After | None = None) -> OnDone:
    async def record(job: Job) -> None:
        out, cut_out = job.stdout.text()
        err, cut_err = job.stderr.text()
        try:
            async with runtime.db.write() as tx:
                await store.finish_command(
                    tx,
                    job.session_id,
                    job.id,
                    status=job.status,
                    exit_code=job.exit_code,
                    duration_ms=job.duration_ms or 0.0,
                    stdout=core.virtualize(runtime.guard, out),
                    stderr=core.virtualize(runtime.guard, err),
                    truncated=cut_out or cut_err,
                )
                if after is not None:
                    await after(tx, job)
        finally:
            core.untrack(runtime, job)

    return record


async def _follow(ctx: ToolContext, job: Job, wait_seconds: float, *, kill_on_cancel: bool) -> None:
    """Wait for the job up to `wait_seconds`, reporting progress each second (a no-op without a progress token).
    A cancelled call kills the job's process group when `kill_on_cancel`."""
    deadline = anyio.current_time() + wait_seconds
    try:
        while not job.done.is_set():
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                return
            with anyio.move_on_after(min(1.0, remaining)):
                await job.done.wait()
            if not job.done.is_set():
                size = job.stdout.total_bytes + job.stderr.total_bytes
                await ctx.ports.progress.report(
                    round(job.elapsed_ms() / 1000, 1), None, f"running for {job.elapsed_ms() / 1000:.0f} s, {size} "
                    "bytes of output so far"
                )  # fmt: skip
        with anyio.move_on_after(5):
            await job.recorded.wait()  # so the next shell_history sees it
    except BaseException:
        if kill_on_cancel:
            job.kill()
        raise


async def _state(ctx: ToolContext) -> store.ShellState:
    async with ctx.runtime.db.read() as tx:
        return await store.get_state(tx, ctx.session_id)


def _writable_dir(ctx: ToolContext, path: str) -> Resolved:
    try:
        where = ctx.runtime.guard.resolve(path, "write")
    except PathError as exc:
        raise ToolError(f"cwd: {exc} Shell commands run only in a writable mount (/workspace).") from None
    if not where.host.is_dir():
        raise ToolError(f"cwd {where.virtual} is not a directory.")
    return where


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
    state = await _state(ctx)
    planned = bash_plan(ctx.runtime.guard, args.command, args.args, args.cwd or state.cwd)
    cwd = planned.cwd.virtual
    job = await _new_job(ctx, "bash", args.command, args=args.args, cwd=cwd, cap=args.max_output_chars)
    await _launch(
        ctx,
        job,
        planned.argv,
        cwd=str(planned.cwd.host),
        env=dict(FIXED_ENV),
        timeout_ms=args.timeout_ms,
        confine=ctx.runtime.confinement.read_only,
    )
    await _follow(ctx, job, args.timeout_ms / 1000 + 5, kill_on_cancel=True)
    return _result(ctx.runtime, job)


async def _launch(
    ctx: ToolContext,
    job: Job,
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    timeout_ms: int,
    confine: Domain | None,
) -> None:
    record = _recorder(ctx.runtime)
    try:
        await start_process(job, argv, cwd=cwd, env=env, limit_s=timeout_ms / 1000, on_done=record, confine=confine)
    except (OSError, SubprocessError) as exc:  # SubprocessError: the child could not confine itself; no exec
        job.stderr.feed(f"could not start: {getattr(exc, 'strerror', None) or exc}".encode())
        job.finish("completed", 127)
        await record(job)


# ---- shell_run -----------------------------------------------------------------------------------------------


class RunInput(Arguments):
    command: CommandText = Field(
        description="Shell command text, run once with `$SHELL -c` (no login shell, no rc file)."
    )
    cwd: str | None = Field(default=None, description="A directory in a writable mount; defaults to the shell cwd.")
    timeout_ms: TimeoutMs = 15_000
    max_output_chars: MaxChars = 12_000
    wait_ms: WaitMs = HANDLE_AFTER_MS


def _approved(ctx: ToolContext, what: WhatRuns) -> WhatRuns:
    """Run only what the person approved: a cwd, env or shell changed since the question is refused."""
    if ctx.approved_run is not None and ctx.approved_run != what:
        raise ToolError(
            "The command's cwd, env or shell changed after the person approved it, so nothing ran. Call again "
            "to ask them about the command as it would run now."
        )
    return what


async def _runs_once(ctx: ToolContext, args: RunInput) -> WhatRuns:
    state = await _state(ctx)
    where = _writable_dir(ctx, args.cwd if args.cwd is not None else state.cwd)
    runner = f"once by {shell_argv()[0]} in a new process"
    return WhatRuns(runner=runner, command=args.command, cwd=where.virtual, env=state.env)


async def shell_run(ctx: ToolContext, args: RunInput) -> CommandResult:
    what = _approved(ctx, await _runs_once(ctx, args))
    where = _writable_dir(ctx, what.cwd)
    env = core.base_env(ctx.runtime, ctx.session_id, where.virtual, what.env)
    job = await _new_job(ctx, "shell", args.command, args=[], cwd=where.virtual, cap=args.max_output_chars)
    argv = [*shell_argv(), "-c", args.command]
    await _launch(ctx, job, argv, cwd=str(where.host), env=env, timeout_ms=args.timeout_ms,
                  confine=ctx.runtime.confinement.shell)  # fmt: skip
    await _follow(ctx, job, args.wait_ms / 1000, kill_on_cancel=True)
    return _result(ctx.runtime, job)


# ---- the persistent shell ------------------------------------------------------------------------------------


def _meta(shell: PersistentShell, session_id: str, cwd: Resolved, started: str) -> dict[str, Any]:
    return {
        "shellId": store.shell_id(session_id, started, cwd.virtual),
        "shellPath": shell.argv[0],
        "mountPath": cwd.mount.mount_path,
        "cwd": cwd.virtual,
        "startedAt": started,
        "updatedAt": started,
        "lastCommandAt": None,
        "commandCount": 0,
        "envKeys": [],
        "pid": shell.proc.pid,
    }


async def _open(ctx: ToolContext, cwd: str | None, *, restart: bool) -> PersistentShell:
    live = core.live_shell(ctx.runtime, ctx.session_id)
    if live is not None and not restart:
        return live
    if live is not None:
        await live.close()
    state = await _state(ctx)
    where = _writable_dir(ctx, cwd or state.cwd)
    env = core.base_env(ctx.runtime, ctx.session_id, where.virtual, state.env)
    shell = await PersistentShell.spawn(str(where.host), env, ctx.runtime.confinement.shell)
    started = utc_now()
    meta = _meta(shell, ctx.session_id, where, started)
    meta["envKeys"] = sorted(env)
    core.set_live_shell(ctx.runtime, ctx.session_id, shell, meta)
    async with ctx.runtime.db.write() as tx:
        state = await store.get_state(tx, ctx.session_id)
        await store.put_state(tx, ctx.session_id, state.model_copy(update={"cwd": where.virtual, "shell": meta}))
    return shell


async def _save_meta(runtime: Runtime, tx: Tx, session_id: str) -> None:
    meta = core.shell_meta(runtime, session_id)
    if meta is None:
        return
    state = await store.get_state(tx, session_id)
    await store.put_state(tx, session_id, state.model_copy(update={"shell": meta}))


def _after_exec(runtime: Runtime, shell: PersistentShell) -> After:
    async def after(tx: Tx, job: Job) -> None:
        meta = core.shell_meta(runtime, job.session_id)
        if meta is None:
            return
        now = utc_now()
        cwd = core.to_virtual(runtime.guard, shell.host_pwd or "") if shell.host_pwd else None
        meta.update(
            lastCommandAt=now, updatedAt=now, commandCount=meta.get("commandCount", 0) + 1,
            cwd=cwd or meta["cwd"], envKeys=shell.env_keys or meta.get("envKeys", []),
        )  # fmt: skip
        state = await store.get_state(tx, job.session_id)
        # The shell's cwd is the session's: a restarted shell, and the next bash call, start where it ended.
        moved = cwd if cwd is not None and runtime.guard.resolve(cwd, "list").mount.access == "read_write" else None
        await store.put_state(tx, job.session_id, state.model_copy(update={"cwd": moved or state.cwd, "shell": meta}))

    return after


class ExecInput(RunInput):
    command: CommandText = Field(description="Shell command text, run in the session's persistent shell.")
    restart: bool = Field(default=False, description="Restart the persistent shell first.")


async def _not_busy(ctx: ToolContext, args: Any) -> None:
    shell = core.live_shell(ctx.runtime, ctx.session_id)
    if shell is not None and shell.busy and shell.current is not None:
        if shell.current.id == core.INTERNAL_JOB:  # a cd or export: its text may hold a shell_set_env value
            raise ToolError("The persistent shell is changing its cwd or env; call again in a moment.")
        raise ToolError(
            f"The persistent shell is busy with command {shell.current.id} ({shell.current.command[:80]!r}). "
            f'Next: shell_wait {{"commandId": "{shell.current.id}"}}; avoid {", ".join(core.AVOID_WHILE_BUSY)}.'
        )


async def shell_exec(ctx: ToolContext, args: ExecInput) -> CommandResult:
    await _not_busy(ctx, args)
    _approved(ctx, await _runs_in_shell(ctx, args))
    shell = await _open(ctx, None, restart=args.restart)
    cd_to = _writable_dir(ctx, args.cwd) if args.cwd is not None else None
    meta = core.shell_meta(ctx.runtime, ctx.session_id) or {}
    cwd = cd_to.virtual if cd_to is not None else meta.get("cwd", "/workspace")
    job = await _new_job(ctx, "persistent-shell", args.command, args=[], cwd=cwd, cap=args.max_output_chars)
    record = _recorder(ctx.runtime, _after_exec(ctx.runtime, shell))
    await shell.start(job, args.timeout_ms / 1000, record, None if cd_to is None else str(cd_to.host))
    await _follow(ctx, job, args.wait_ms / 1000, kill_on_cancel=True)
    return _result(ctx.runtime, job)


async def _runs_in_shell(ctx: ToolContext, args: ExecInput) -> WhatRuns:
    """The persistent shell's command: its cwd, the session env, and the names the live shell exported itself
    (a restart starts clean)."""
    live = core.live_shell(ctx.runtime, ctx.session_id)
    meta = core.shell_meta(ctx.runtime, ctx.session_id) if live is not None and not args.restart else None
    state = await _state(ctx)
    where = _writable_dir(ctx, args.cwd if args.cwd is not None else meta["cwd"] if meta else state.cwd)
    names: tuple[str, ...] = ()
    if meta is not None:
        fixed = core.base_env(ctx.runtime, ctx.session_id, where.virtual, {})
        names = tuple(sorted(set(meta.get("envKeys", [])) - set(fixed) - set(state.env) - TRANSIENT_KEYS))
    how = "in a new persistent shell" if meta is None else f"in the persistent shell {meta['shellId']}"
    runner = f"{how} ({shell_argv()[0]}; its cwd and exported env persist)"
    return WhatRuns(runner=runner, command=args.command, cwd=where.virtual, env=state.env, shell_names=names)


async def _internal(ctx: ToolContext, shell: PersistentShell, script: str) -> None:
    """A control command (cd, export, unset) through the live shell; not part of the history."""
    job = Job(
        core.INTERNAL_JOB, ctx.session_id, "persistent-shell", script, [], "", utc_now(), Output(2000), Output(2000)
    )

    async def done(_: Job) -> None:
        return None

    await shell.start(job, 5.0, done)
    with anyio.move_on_after(6):
        await job.done.wait()
    if job.exit_code != 0:
        err, _ = job.stderr.text()
        raise ToolError(f"The persistent shell refused it: {core.virtualize(ctx.runtime.guard, err)[:300]}")


async def _posture(ctx: ToolContext, session_id: str | None = None) -> core.ShellPosture:
    async with ctx.runtime.db.read() as tx:
        record = await scoped_session(dataclasses.replace(ctx, tx=tx), session_id)
        return await core.posture(ctx.runtime, tx, record.id)


class OpenInput(Arguments):
    cwd: str | None = Field(default=None, description="Start in this directory (a writable mount).")
    restart: bool = Field(default=False, description="Replace a live shell.")


async def shell_open(ctx: ToolContext, args: OpenInput) -> core.ShellPosture:
    if args.restart:
        await _not_busy(ctx, args)
    await _open(ctx, args.cwd, restart=args.restart)
    return await _posture(ctx)


class RestartInput(Arguments):
    cwd: str | None = Field(default=None, description="Start in this directory (a writable mount).")


async def shell_restart(ctx: ToolContext, args: RestartInput) -> core.ShellPosture:
    await _open(ctx, args.cwd, restart=True)
    return await _posture(ctx)


async def shell_close(ctx: ToolContext, _: NoArguments) -> core.ShellPosture:
    shell = core.live_shell(ctx.runtime, ctx.session_id)
    if shell is not None:
        await shell.close()
    meta = core.shell_meta(ctx.runtime, ctx.session_id)
    core.set_live_shell(ctx.runtime, ctx.session_id, None, meta or {})
    return await _posture(ctx)


class SetCwdInput(Arguments):
    path: str = Field(min_length=1, max_length=4096, description="A directory inside a mount.")


async def shell_set_cwd(ctx: ToolContext, args: SetCwdInput) -> core.ShellPosture:
    try:
        where = ctx.runtime.guard.resolve(args.path, "list")
    except PathError as exc:
        raise ToolError(str(exc)) from None
    if not where.host.is_dir():
        raise ToolError(f"{where.virtual} is not a directory.")
    await _not_busy(ctx, args)
    shell = core.live_shell(ctx.runtime, ctx.session_id)
    if shell is not None:
        await _internal(ctx, shell, f"cd -- '{_sq(str(where.host))}'")
        meta = core.shell_meta(ctx.runtime, ctx.session_id)
        if meta is not None:
            meta.update(cwd=where.virtual, updatedAt=utc_now())
    async with ctx.runtime.db.write() as tx:
        state = await store.get_state(tx, ctx.session_id)
        await store.put_state(tx, ctx.session_id, state.model_copy(update={"cwd": where.virtual}))
        await _save_meta(ctx.runtime, tx, ctx.session_id)
    return await _posture(ctx)


def _sq(text: str) -> str:
    return text.replace("'", "'\\''")


EnvKey = Annotated[str, Field(min_length=1, max_length=128)]


class SetEnvInput(Arguments):
    key: EnvKey
    value: Annotated[str, Field(min_length=1, max_length=8192)]


class UnsetEnvInput(Arguments):
    key: EnvKey


async def _change_env(ctx: ToolContext, key: str, value: str | None) -> core.ShellPosture:
    core.check_env_key(key)
    if value is not None and "\x00" in value:
        raise ToolError("The value contains a NUL byte; refused.")
    await _not_busy(ctx, None)
    shell = core.live_shell(ctx.runtime, ctx.session_id)
    if shell is not None:
        await _internal(ctx, shell, f"export {key}='{_sq(value)}'" if value is not None else f"unset {key}")
        meta = core.shell_meta(ctx.runtime, ctx.session_id)
        if meta is not None:
            keys = set(meta.get("envKeys", []))
            keys = keys | {key} if value is not None else keys - {key}
            meta.update(envKeys=sorted(keys), updatedAt=utc_now())
    async with ctx.runtime.db.write() as tx:
        state = await store.get_state(tx, ctx.session_id)
        env = dict(state.env)
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
        await store.put_state(tx, ctx.session_id, state.model_copy(update={"env": env}))
        await _save_meta(ctx.runtime, tx, ctx.session_id)
    return await _posture(ctx)


async def shell_set_env(ctx: ToolContext, args: SetEnvInput) -> core.ShellPosture:
    return await _change_env(ctx, args.key, args.value)


async def shell_unset_env(ctx: ToolContext, args: UnsetEnvInput) -> core.ShellPosture:
    return await _change_env(ctx, args.key, None)


# ---- reading -------------------------------------------------------------------------------------------------


class ScopedInput(Arguments):
    session_id: SessionId | None = None


async def shell_describe(ctx: ToolContext, args: ScopedInput) -> core.ShellPosture:
    record = await scoped_session(ctx, args.session_id)
    return await core.posture(ctx.runtime, ctx.tx, record.id)


class HistoryInput(ScopedInput):
    limit: Annotated[int, Field(ge=1, le=50)] = 5


class HistoryOutput(WireModel):
    session_id: str
    count: int
    commands: list[core.CommandView]
    busy_plan: core.BusyPlan | None
    recovery_plan: NextTool | None
    next_step: NextTool | None


async def shell_history(ctx: ToolContext, args: HistoryInput) -> HistoryOutput:
    record = await scoped_session(ctx, args.session_id)
    posture = await core.posture(ctx.runtime, ctx.tx, record.id)
    views = [core.record_view(ctx.runtime, r) for r in await store.recent_commands(ctx.tx, record.id, args.limit)]
    return HistoryOutput(
        session_id=record.id,
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
        return _result(ctx.runtime, job)
    record = await store.get_command(ctx.tx, session_id, command_id)
    if record is None:
        raise ToolError(f"No command {command_id} in this session; shell_history lists the recent ones.")
    return _stored_result(record, core.record_view(ctx.runtime, record))


async def shell_read_command(ctx: ToolContext, args: ReadCommandInput) -> CommandResult:
    record = await scoped_session(ctx, args.session_id)
    return await _read(ctx, record.id, args.command_id)


class LastOutput(WireModel):
    session_id: str
    last_command: CommandResult | None
    live_command: core.CommandView | None
    busy_plan: core.BusyPlan | None
    recovery_plan: NextTool | None
    next_step: NextTool | None


async def shell_read_last_output(ctx: ToolContext, args: ScopedInput) -> LastOutput:
    record = await scoped_session(ctx, args.session_id)
    posture = await core.posture(ctx.runtime, ctx.tx, record.id)
    last = None
    if posture.last_command is not None:
        last = await _read(ctx, record.id, posture.last_command.command_id)
    return LastOutput(
        session_id=record.id,
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
        await _follow(ctx, job, args.timeout_ms / 1000, kill_on_cancel=False)
        result = _result(ctx.runtime, job)
    else:
        async with ctx.runtime.db.read() as tx:
            found = await store.get_command(tx, ctx.session_id, command_id)
            if found is None:
                raise ToolError(f"No command {command_id} in this session; shell_history lists the recent ones.")
            result = _stored_result(found, core.record_view(ctx.runtime, found))
    if result.status == "running":
        return WaitOutput(state="running", command=result)
    return WaitOutput(state="completed" if result.status == "completed" else "error", command=result)


# ---- definitions ---------------------------------------------------------------------------------------------

DEFINITIONS = (
    ToolDefinition(
        name="bash",
        title="Run a read-only command",
        description="Run one allowlisted read-only program (pwd, env, ls, cat, head, tail, wc, basename, dirname, "
        "realpath, stat) with arguments, without a shell, inside the cwd's mount.",
        input_model=BashInput,
        output_model=CommandResult,
        handler=bash,
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
        description="Run a shell command once (`$SHELL -lc`) in a writable mount, after a person approves the "
        "exact command and cwd. Long commands return a handle for shell_wait.",
        input_model=RunInput,
        output_model=CommandResult,
        handler=shell_run,
        run_context=_runs_once,
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
    ToolDefinition(
        name="shell_exec",
        title="Run in the persistent shell",
        description="Run a command in the session's persistent shell (cwd and exported env persist), after a "
        "person approves the exact command and cwd. Long commands return a handle.",
        input_model=ExecInput,
        output_model=CommandResult,
        handler=shell_exec,
        run_context=_runs_in_shell,
        precondition=_not_busy,
        permission_policy="always_ask",
        effects=("sandbox_execute", "resource_write"),
        read_only=False,
        destructive=True,
        open_world=True,
        own_transactions=True,
        interrupt_behavior="cancel",
        timeout_seconds=55.0,
        examples=(ToolExample(description="Activate and build", input={"command": "cd src && make"}),),
    ),
    ToolDefinition(
        name="shell_open",
        title="Open the persistent shell",
        description="Open the session's persistent shell (a no-op when one is live, unless restart).",
        input_model=OpenInput,
        output_model=core.ShellPosture,
        handler=shell_open,
        effects=("sandbox_execute", "memory_write"),
        read_only=False,
        own_transactions=True,
    ),
    ToolDefinition(
        name="shell_restart",
        title="Restart the persistent shell",
        description="Kill the session's persistent shell (and anything it runs) and start a fresh one.",
        input_model=RestartInput,
        output_model=core.ShellPosture,
        handler=shell_restart,
        effects=("sandbox_execute", "memory_write"),
        read_only=False,
        own_transactions=True,
    ),
    ToolDefinition(
        name="shell_close",
        title="Close the persistent shell",
        description="Close the session's persistent shell, killing its process group.",
        input_model=NoArguments,
        output_model=core.ShellPosture,
        handler=shell_close,
        effects=("sandbox_execute", "memory_write"),
        read_only=False,
        idempotent=True,
        own_transactions=True,
    ),
    ToolDefinition(
        name="shell_set_cwd",
        title="Set the shell cwd",
        description="Set the session's shell cwd (a directory inside a mount); the live shell moves too.",
        input_model=SetCwdInput,
        output_model=core.ShellPosture,
        handler=shell_set_cwd,
        effects=("memory_write",),
        read_only=False,
        idempotent=True,
        own_transactions=True,
    ),
    ToolDefinition(
        name="shell_set_env",
        title="Set a shell env variable",
        description="Set an env variable for the session's commands (protected keys refused; values never shown).",
        input_model=SetEnvInput,
        output_model=core.ShellPosture,
        handler=shell_set_env,
        hidden_args=("value",),
        effects=("memory_write",),
        read_only=False,
        idempotent=True,
        own_transactions=True,
    ),
    ToolDefinition(
        name="shell_unset_env",
        title="Unset a shell env variable",
        description="Remove an env variable from the session's commands and its live shell.",
        input_model=UnsetEnvInput,
        output_model=core.ShellPosture,
        handler=shell_unset_env,
        effects=("memory_write",),
        read_only=False,
        idempotent=True,
        own_transactions=True,
    ),
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
        effects=("memory_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="shell_wait",
        title="Wait for a shell command",
        description="Wait up to timeoutMs for a running command (default: the one running now): idle, running, "
        "completed or error.",
        input_model=WaitInput,
        output_model=WaitOutput,
        handler=shell_wait,
        effects=("memory_read",),
        own_transactions=True,
        interrupt_behavior="cancel",
        timeout_seconds=55.0,
    ),
)
