"""What every shell tool shares about a command: its `CommandResult` (live or from the history), starting and
recording a job, following it with progress until it ends or the call's wait runs out, the session's shell state,
the writable cwd a command may run in, and the check that only what a person approved runs. The tools that wait on
a process declare `own_transactions`: they read and write SQLite in short transactions of their own and hold none
while the process runs, so a 45-second command never blocks another writer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from pydantic import Field

from managed_tools.sandbox import layers
from managed_tools.sandbox.paths import PathError, Resolved
from managed_tools.stores import shell as store
from managed_tools.stores.db import NoTransaction, Tx
from managed_tools.stores.ids import utc_now
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.context.what_runs import WhatRuns, changed_files, visible
from managed_tools.tools.framework.wire import secret_scan
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import NextTool, WireModel
from managed_tools.tools.shell import posture as core
from managed_tools.tools.shell.diagnose import CODES, sandbox_note
from managed_tools.tools.shell.runner import Job, OnDone, Output

HANDLE_AFTER_MS = 45_000  # a call never holds the client much longer than this: it returns a handle instead
ANSWER_MARGIN_S = 0.5  # of a call's deadline, kept for shaping and sending the answer


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
    stderr: str  # the output once: no `text` repeating both (issue 38, item 8)
    truncated: bool
    network_blocked: list[str] = Field(
        default_factory=list,
        description="Connections the sandbox's egress proxy refused this command, each `host:port (why)`; a "
        "host is let through only if config sandbox.network.allowedDomains lists it.",
    )
    next_step: NextTool | None
    limit: str | None = Field(
        default=None,
        description="The sandbox limit that stopped it (a sandbox.limits key: processes, memoryMB, fileSizeMB, "
        "cpuSeconds), if one did.",
    )


UNRECORDED_OUTPUT_CHARS = 2000


def command_result(runtime: Runtime, job: Job) -> CommandResult:
    out, cut_out = job.stdout.text()
    err, cut_err = job.stderr.text()
    out, err = core.virtualize(runtime.guard, out), core.virtualize(runtime.guard, err)
    running = not job.done.is_set()
    if not running and job.unrecorded is not None:
        # Reported as completed, a command whose end is not in the history would be an acknowledgement the state
        # does not hold; an error says what ran, and that a retry would run it again.
        text = (out + err)[:UNRECORDED_OUTPUT_CHARS]
        raise ToolError(
            f"The command ran ({job.status}, exit code {job.exit_code}) but its end could not be recorded: "
            f"{job.unrecorded} It is not in the session's history; check what it did before running it again. "
            f"Its output{' (cut)' if len(out + err) > len(text) else ''}:\n{text}"
        )
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
        truncated=cut_out or cut_err,
        network_blocked=job.network_blocked,
        next_step=step,
        limit=job.limit,
    )


def stored_result(record: store.CommandRecord, view: core.CommandView) -> CommandResult:
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
        truncated=record.truncated,
        next_step=None,
    )


# ---- running a job -------------------------------------------------------------------------------------------


async def new_job(
    ctx: ToolContext, kind: store.CommandKind, command: str, *, args: list[str], cwd: str, cap: int
) -> Job:
    started = utc_now()
    async with ctx.runtime.db.write() as tx:
        kept, kept_args = _kept(ctx.runtime, command), [_kept(ctx.runtime, arg) for arg in args]
        cid = await store.start_command(tx, ctx.session_id, kind, kept, args=kept_args, cwd=cwd, started_at=started)
    job = Job(cid, ctx.session_id, kind, command, args, cwd, started, Output(cap), Output(cap))
    core.track(ctx.runtime, job)
    return job


def _kept(runtime: Runtime, text: str) -> str:
    """What the session's shell history keeps (and memory_search indexes): credentials masked, as in results."""
    return secret_scan.masked(text) if runtime.secret_scanning.results else text


After = Callable[[Tx, Job], Awaitable[None]]


def _explain(runtime: Runtime, job: Job) -> None:
    """A writable-shell command that could not execute or find its program because of the sandbox says why."""
    if job.kind == "bash" or job.exit_code not in CODES:
        return
    try:
        cwd = runtime.guard.resolve(job.cwd, "read").host
    except PathError:
        return
    note = sandbox_note(runtime.confinement, job.command, cwd, job.stderr.text()[0])
    if note is not None:
        job.stderr.feed((("\n" if job.stderr.total_bytes else "") + note + "\n").encode())


def recorder(runtime: Runtime, after: After | None = None) -> OnDone:
    async def record(job: Job) -> None:
        _explain(runtime, job)
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
                    stdout=_kept(runtime, core.virtualize(runtime.guard, out)),
                    stderr=_kept(runtime, core.virtualize(runtime.guard, err)),
                    truncated=cut_out or cut_err,
                )
                if after is not None:
                    await after(tx, job)
        finally:
            core.untrack(runtime, job)

    return record


async def follow(ctx: ToolContext, job: Job, wait_seconds: float, *, kill_on_cancel: bool) -> None:
    """Wait for the job up to `wait_seconds`, reporting progress each second (a no-op without a progress token).
    A cancelled call kills the job's process group when `kill_on_cancel`. The wait never outlasts the call's
    deadline (a client may shorten it): the call answers with the job still running, never stopped mid-wait."""
    deadline = min(anyio.current_time() + wait_seconds, ctx.deadline - ANSWER_MARGIN_S)
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


async def shell_state(ctx: ToolContext) -> store.ShellState:
    """Read through the call's own transaction where it has one: a second read from the pool while the call holds
    one deadlocks once as many calls as there are pooled readers do it at once (six retries of one approval)."""
    if not isinstance(ctx.tx, NoTransaction):
        return await store.get_state(ctx.tx, ctx.session_id)
    async with ctx.runtime.db.read() as tx:
        return await store.get_state(tx, ctx.session_id)


def writable_dir(ctx: ToolContext, path: str) -> Resolved:
    try:
        where = ctx.runtime.guard.resolve(path, "write")
    except PathError as exc:
        raise ToolError(f"cwd: {exc} Shell commands run only in a writable mount (/workspace).") from None
    try:
        is_dir = where.host.is_dir()
    except OSError as exc:  # a name too long for the filesystem, say
        raise ToolError(f"cwd {where.virtual} cannot be used: {exc.strerror}.") from None
    if not is_dir:
        raise ToolError(f"cwd {where.virtual} is not a directory.")
    return where


def contained(ctx: ToolContext, args: object) -> str | None:
    """shell_run and shell_exec: every effect lands in the writable shell's sandbox, so a call needs more than it
    gives only when the sandbox itself falls short (a missing layer, unrestricted network)."""
    return layers.shortfall(ctx.runtime.confinement)


def approved(ctx: ToolContext, what: WhatRuns) -> WhatRuns:
    """Run only what the person approved: a cwd, env, shell or file it runs changed since the question is
    refused."""
    if ctx.approved_run is None or ctx.approved_run == what:
        return what
    changed = changed_files(ctx.approved_run.binds, what.binds)
    if changed and ctx.approved_run.model_copy(update={"binds": what.binds}) == what:
        raise ToolError(
            f"{', '.join(visible(path) for path in changed)} changed after this command was approved, so nothing "
            "ran. Call again to be asked about the command as it would run now."
        )
    raise ToolError(
        "The command's cwd, env or shell changed after the person approved it, so nothing ran. Call again "
        "to ask them about the command as it would run now."
    )
