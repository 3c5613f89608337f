"""The session's persistent shell: `shell_exec` (permission-gated, run in the live shell whose cwd and exported env
persist), opening, restarting and closing it, and the session's shell cwd and env (`shell_set_cwd`,
`shell_set_env`, `shell_unset_env`), which a live shell follows through internal control commands.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from pydantic import Field

from managed_tools.sandbox.egress import proxy_env
from managed_tools.sandbox.paths import PathError, Resolved
from managed_tools.stores import shell as store
from managed_tools.stores.db import Tx
from managed_tools.stores.ids import utc_now
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.context.what_runs import WhatRuns
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, NoArguments
from managed_tools.tools.shell import posture as core
from managed_tools.tools.shell.binds import bind
from managed_tools.tools.shell.jobs import (
    After,
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
from managed_tools.tools.shell.oneshot import CommandText, RunInput
from managed_tools.tools.shell.runner import TRANSIENT_KEYS, Job, Output, PersistentShell, shell_argv
from managed_tools.tools.shell.virtual_paths import map_virtual_paths


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
    state = await shell_state(ctx)
    where = writable_dir(ctx, cwd or state.cwd)
    env = core.base_env(ctx.runtime, ctx.session_id, where.virtual, state.env)
    confinement = ctx.runtime.confinement
    shell = await PersistentShell.spawn(str(where.host), env, confinement.shell, confinement.egress)
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
    command: CommandText = Field(description="Shell command text.")
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
    approved(ctx, await _runs_in_shell(ctx, args))
    shell = await _open(ctx, None, restart=args.restart)
    cd_to = writable_dir(ctx, args.cwd) if args.cwd is not None else None
    meta = core.shell_meta(ctx.runtime, ctx.session_id) or {}
    cwd = cd_to.virtual if cd_to is not None else meta.get("cwd", "/workspace")
    job = await new_job(ctx, "persistent-shell", args.command, args=[], cwd=cwd, cap=args.max_output_chars)
    record = recorder(ctx.runtime, _after_exec(ctx.runtime, shell))
    text = map_virtual_paths(ctx.runtime.guard, args.command)
    await shell.start(job, args.timeout_ms / 1000, record, None if cd_to is None else str(cd_to.host), text=text)
    await follow(ctx, job, args.wait_ms / 1000, kill_on_cancel=True)
    return command_result(ctx.runtime, job)


async def _runs_in_shell(ctx: ToolContext, args: ExecInput) -> WhatRuns:
    """The persistent shell's command: its cwd, the session env, and the names the live shell exported itself
    (a restart starts clean)."""
    map_virtual_paths(ctx.runtime.guard, args.command)  # a path it would refuse is refused before anyone is asked
    live = core.live_shell(ctx.runtime, ctx.session_id)
    meta = core.shell_meta(ctx.runtime, ctx.session_id) if live is not None and not args.restart else None
    state = await shell_state(ctx)
    where = writable_dir(ctx, args.cwd if args.cwd is not None else meta["cwd"] if meta else state.cwd)
    names: tuple[str, ...] = ()
    # The egress proxy's variables are the server's (set at the shell's spawn), not an earlier command's.
    proxy = tuple(proxy_env()) if ctx.runtime.confinement.egress is not None else ()
    if meta is not None:
        fixed = core.base_env(ctx.runtime, ctx.session_id, where.virtual, {})
        exported = set(meta.get("envKeys", [])) - set(fixed) - set(state.env) - set(proxy) - TRANSIENT_KEYS
        names = tuple(sorted(exported))
    how = "in a new persistent shell" if meta is None else f"in the persistent shell {meta['shellId']}"
    runner = f"{how} ({shell_argv()[0]}; its cwd and exported env persist)"
    what = WhatRuns(
        runner=runner, command=args.command, cwd=where.virtual, env=state.env, shell_names=names, proxy_names=proxy
    )
    return await bind(ctx.runtime.guard, ctx.runtime.confinement.shell_path, what)


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


async def _changed(ctx: ToolContext, changed: str) -> core.ShellChange:
    async with ctx.runtime.db.read() as tx:
        return await core.change(ctx.runtime, tx, ctx.session_id, changed)


class OpenInput(Arguments):
    cwd: str | None = Field(default=None, description="Start in this directory (a writable mount).")
    restart: bool = Field(default=False, description="Replace a live shell.")


async def shell_open(ctx: ToolContext, args: OpenInput) -> core.ShellChange:
    if args.restart:
        await _not_busy(ctx, args)
    live = core.live_shell(ctx.runtime, ctx.session_id) is not None
    await _open(ctx, args.cwd, restart=args.restart)
    return await _changed(ctx, "restarted" if live and args.restart else "already open" if live else "opened")


class RestartInput(Arguments):
    cwd: str | None = Field(default=None, description="Start in this directory (a writable mount).")


async def shell_restart(ctx: ToolContext, args: RestartInput) -> core.ShellChange:
    live = core.live_shell(ctx.runtime, ctx.session_id) is not None
    await _open(ctx, args.cwd, restart=True)
    return await _changed(ctx, "restarted" if live else "opened")


def _not_running(ctx: ToolContext) -> None:
    """Closing is not a way to stop a command by accident: shell_restart is the explicit one."""
    shell = core.live_shell(ctx.runtime, ctx.session_id)
    if shell is not None and shell.busy and shell.current is not None and shell.current.id != core.INTERNAL_JOB:
        raise ToolError(
            f"The persistent shell is running command {shell.current.id} ({shell.current.command[:80]!r}); "
            f'closing it would kill the command. Next: shell_wait {{"commandId": "{shell.current.id}"}}, or '
            "shell_restart to kill it on purpose."
        )


async def shell_close(ctx: ToolContext, _: NoArguments) -> core.ShellChange:
    _not_running(ctx)
    shell = core.live_shell(ctx.runtime, ctx.session_id)
    if shell is not None:
        await shell.close()
    meta = core.shell_meta(ctx.runtime, ctx.session_id)
    core.set_live_shell(ctx.runtime, ctx.session_id, None, meta or {})
    return await _changed(ctx, "closed" if shell is not None else "no live shell to close")


class SetCwdInput(Arguments):
    path: str = Field(min_length=1, max_length=4096, description="A directory inside a mount.")


async def shell_set_cwd(ctx: ToolContext, args: SetCwdInput) -> core.ShellChange:
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
    return await _changed(ctx, f"cwd set to {where.virtual}")


def _sq(text: str) -> str:
    return text.replace("'", "'\\''")


EnvKey = Annotated[str, Field(min_length=1, max_length=128)]


class SetEnvInput(Arguments):
    key: EnvKey
    value: Annotated[str, Field(min_length=1, max_length=8192)]


class UnsetEnvInput(Arguments):
    key: EnvKey


async def _change_env(ctx: ToolContext, key: str, value: str | None) -> core.ShellChange:
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
    return await _changed(ctx, f"{key} set" if value is not None else f"{key} unset")


async def shell_set_env(ctx: ToolContext, args: SetEnvInput) -> core.ShellChange:
    return await _change_env(ctx, args.key, args.value)


async def shell_unset_env(ctx: ToolContext, args: UnsetEnvInput) -> core.ShellChange:
    return await _change_env(ctx, args.key, None)


DEFINITIONS = (
    ToolDefinition(
        name="shell_exec",
        title="Run in the persistent shell",
        description="Run a command in the session's persistent shell (cwd and env persist) once a person approves it; "
        "/workspace/... paths mapped; long ones return a handle.",
        input_model=ExecInput,
        output_model=CommandResult,
        handler=shell_exec,
        scans_secrets=True,  # commands may carry a credential, output may print one
        run_context=_runs_in_shell,
        contained=contained,
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
        output_model=core.ShellChange,
        handler=shell_open,
        effects=("sandbox_execute", "memory_write"),
        read_only=False,
        own_transactions=True,
    ),
    ToolDefinition(
        name="shell_restart",
        title="Restart the persistent shell",
        description="Kill the persistent shell (a running command is recorded as killed) and start a fresh one.",
        input_model=RestartInput,
        output_model=core.ShellChange,
        handler=shell_restart,
        effects=("sandbox_execute", "memory_write"),
        read_only=False,
        own_transactions=True,
    ),
    ToolDefinition(
        name="shell_close",
        title="Close the persistent shell",
        description="Close the session's persistent shell; refused while a command runs (shell_restart kills it).",
        input_model=NoArguments,
        output_model=core.ShellChange,
        handler=shell_close,
        effects=("sandbox_execute", "memory_write"),
        read_only=False,
        idempotent=True,
        own_transactions=True,
    ),
    ToolDefinition(
        name="shell_set_cwd",
        title="Set the shell cwd",
        description="Set the session's shell cwd (a directory in a mount); the live shell moves too.",
        input_model=SetCwdInput,
        output_model=core.ShellChange,
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
        output_model=core.ShellChange,
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
        output_model=core.ShellChange,
        handler=shell_unset_env,
        effects=("memory_write",),
        read_only=False,
        idempotent=True,
        own_transactions=True,
    ),
)
