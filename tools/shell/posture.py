"""The shell hand's state: this process's live shells and commands, the durable state in SQLite, and the views
(describe, busy and recovery plans) that the shell, permission, session, memory and outcome tools all report.

Live state wins over stored state; a shell stored as active that no live process of ours backs is `closed`.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

import anyio
from pydantic import Field

from managed_tools.sandbox.paths import PathGuard
from managed_tools.stores import shell as store
from managed_tools.stores.db import Tx
from managed_tools.tools.framework.calls.arguments import clip
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import NextTool, WireModel
from managed_tools.tools.shell.runner import Job, PersistentShell

PREVIEW_CHARS = 400
RECENT = 5
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Keys the session env may not set: they steer the dynamic loader, libc or the shell itself, which would turn the
# always_allow `bash` (and shell_set_env) into a way to run code without approval.
PROTECTED_KEYS = frozenset(
    {"PATH", "LANG", "TMPDIR", "HOME", "SHELL", "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH",
     "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "HOSTALIASES", "RESOLV_HOST_CONF", "LOCALDOMAIN"}
)  # fmt: skip
PROTECTED_PREFIXES = ("LD_", "MANAGED_TOOLS_", "MALLOC_", "BASH_FUNC_")
READ_TOOLS = ["shell_describe", "shell_read_command", "shell_read_last_output", "shell_history", "read", "glob",
              "grep", "bash"]  # fmt: skip
AVOID_WHILE_BUSY = ["shell_run", "shell_exec", "shell_restart", "shell_close"]
# The id of a control command (cd, export, unset) sent through the live shell: never shown, as an export
# carries a shell_set_env value.
INTERNAL_JOB = "internal"
CLOSE_WAIT_SECONDS = 4.0  # a killed command's pump drains for at most DRAIN_AFTER_EXIT, then records its end


# ---- this process's live shells and commands -----------------------------------------------------------------

_SHELLS: dict[tuple[str, str], PersistentShell] = {}
_JOBS: dict[tuple[str, str, str], Job] = {}
_META: dict[tuple[str, str], dict[str, Any]] = {}


def _key(runtime: Runtime, session_id: str) -> tuple[str, str]:
    return runtime.db.key, session_id


def live_shell(runtime: Runtime, session_id: str) -> PersistentShell | None:
    shell = _SHELLS.get(_key(runtime, session_id))
    return shell if shell is not None and shell.alive else None


def set_live_shell(runtime: Runtime, session_id: str, shell: PersistentShell | None, meta: dict[str, Any]) -> None:
    key = _key(runtime, session_id)
    if shell is None:
        _SHELLS.pop(key, None)
    else:
        _SHELLS[key] = shell
    _META[key] = meta


def shell_meta(runtime: Runtime, session_id: str) -> dict[str, Any] | None:
    return _META.get(_key(runtime, session_id))


def track(runtime: Runtime, job: Job) -> None:
    _JOBS[(runtime.db.key, job.session_id, job.id)] = job


def untrack(runtime: Runtime, job: Job) -> None:
    _JOBS.pop((runtime.db.key, job.session_id, job.id), None)


def live_job(runtime: Runtime, session_id: str, command_id: str) -> Job | None:
    return _JOBS.get((runtime.db.key, session_id, command_id))


def running_jobs(runtime: Runtime, session_id: str) -> list[Job]:
    db = runtime.db.key
    return [j for (d, s, _), j in _JOBS.items() if d == db and s == session_id and not j.done.is_set()]


async def close_all(runtime: Runtime) -> None:
    """At shutdown: every shell and command of this runtime is killed, and recorded as such by its pump before
    the database closes (a job cancelled before it started has no pump: the wait is bounded)."""
    db = runtime.db.key
    for (d, _, _), job in list(_JOBS.items()):
        if d == db:
            job.kill()
    for key, shell in list(_SHELLS.items()):
        if key[0] == db:
            await shell.close()
            _SHELLS.pop(key, None)
    with anyio.move_on_after(CLOSE_WAIT_SECONDS):
        for (d, _, _), job in list(_JOBS.items()):
            if d == db:
                await job.recorded.wait()


# ---- paths and env -------------------------------------------------------------------------------------------


def to_virtual(guard: PathGuard, host: str) -> str | None:
    """The virtual path of a host path inside a mount (longest mount first), or None."""
    real = os.path.realpath(host)
    for mount in guard.mounts:
        root = os.path.realpath(mount.root)
        if real == root:
            return mount.mount_path
        if real.startswith(root.rstrip(os.sep) + os.sep):
            return mount.mount_path + "/" + os.path.relpath(real, root)
    return None


def _renderings(root: str) -> set[str]:
    """`root` as programs may print it: as is, and escaped as ls/stat/wc quote a name (shell styles double a
    quote as '\\'', c and locale double backslashes, c escapes ", escape style escapes spaces)."""
    doubled = root.replace("\\", "\\\\")
    return {root, root.replace("'", "'\\''"), doubled, doubled.replace('"', '\\"'), doubled.replace(" ", "\\ ")}


def virtualize(guard: PathGuard, text: str) -> str:
    """Host roots in output become their virtual paths: results show /workspace/..., never the host layout."""
    pairs = [(shown, m.mount_path) for m in guard.mounts for shown in _renderings(os.path.realpath(m.root))]
    for shown, virtual in sorted(pairs, key=lambda pair: len(pair[0]), reverse=True):
        text = text.replace(shown, virtual)
    return text


def check_env_key(key: str) -> None:
    if not ENV_KEY.match(key):
        raise ToolError(f"Env key {key!r} must match [A-Za-z_][A-Za-z0-9_]*.")
    if key in PROTECTED_KEYS or key.startswith(PROTECTED_PREFIXES):
        raise ToolError(f"Env key {key} is protected (it steers the loader, libc or the shell); refused.")


def base_env(runtime: Runtime, session_id: str, cwd: str, session_env: dict[str, str]) -> dict[str, str]:
    """The minimal environment every command gets: nothing of the server's own environment leaks in. The
    toolchain's (private caches, VIRTUAL_ENV) comes first, so shell_set_env can point a tool elsewhere."""
    env = {**runtime.confinement.shell_env, **{k: v for k, v in session_env.items() if ENV_KEY.match(k)}}
    env.update(
        {
            "PATH": runtime.confinement.shell_path,
            "LANG": "C.UTF-8",
            # Private to this runtime and outside every mount: no start-up or config file a model wrote is read.
            "TMPDIR": str(runtime.confinement.tmp),
            "HOME": str(runtime.confinement.home),
            "MANAGED_TOOLS_SESSION_ID": session_id,
            "MANAGED_TOOLS_WORKSPACE_CWD": cwd,
        }
    )
    return env


# ---- views ---------------------------------------------------------------------------------------------------


class CommandView(WireModel):
    command_id: str
    kind: store.CommandKind
    command: str
    args: list[str]
    cwd: str
    status: store.CommandStatus
    exit_code: int | None
    timed_out: bool
    duration_ms: float | None
    started_at: str
    updated_at: str
    stdout_preview: str
    stderr_preview: str
    in_this_process: bool


def job_view(guard: PathGuard, job: Job) -> CommandView:
    out, _ = job.stdout.text()
    err, _ = job.stderr.text()
    return CommandView(
        command_id=job.id,
        kind=job.kind,
        command=job.command,
        args=job.args,
        cwd=job.cwd,
        status=job.status,
        exit_code=job.exit_code,
        timed_out=job.status == "timed_out",
        duration_ms=job.duration_ms if job.done.is_set() else job.elapsed_ms(),
        started_at=job.started_at,
        updated_at=job.started_at,
        stdout_preview=clip(virtualize(guard, out), PREVIEW_CHARS),
        stderr_preview=clip(virtualize(guard, err), PREVIEW_CHARS),
        in_this_process=True,
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def record_view(runtime: Runtime, record: store.CommandRecord) -> CommandView:
    """A stored command; one stored as running is followed live when this process runs it, and is `lost` when
    the process that ran it is gone."""
    job = live_job(runtime, record.session_id, record.id)
    if job is not None:
        return job_view(runtime.guard, job)
    status = record.status
    if status == "running" and (record.owner_pid == os.getpid() or not _pid_alive(record.owner_pid)):
        status = "lost"
    return CommandView(
        command_id=record.id,
        kind=record.kind,
        command=record.command,
        args=record.args,
        cwd=record.cwd,
        status=status,
        exit_code=record.exit_code,
        timed_out=record.status == "timed_out",
        duration_ms=record.duration_ms,
        started_at=record.started_at,
        updated_at=record.updated_at,
        stdout_preview=clip(record.stdout, PREVIEW_CHARS),
        stderr_preview=clip(record.stderr, PREVIEW_CHARS),
        in_this_process=False,
    )


class ShellView(WireModel):
    shell_id: str
    shell_path: str
    status: Literal["active", "closed"]
    live: bool = Field(description="Backed by a running process of this server.")
    mount_path: str
    cwd: str
    started_at: str
    updated_at: str
    last_command_at: str | None
    command_count: int
    busy: bool
    current_command: CommandView | None
    env_keys: list[str]


class BusyPlan(WireModel):
    tool: str
    args: dict[str, Any]
    rationale: str
    allowed_tools: list[str]
    avoid_tools: list[str]


class ShellPosture(WireModel):
    session_id: str
    cwd: str
    env_keys: list[str]
    persistent_shell: ShellView | None
    busy: bool
    running_commands: list[CommandView]
    last_command: CommandView | None
    recent_commands: list[CommandView]
    busy_plan: BusyPlan | None
    recovery_plan: NextTool | None
    next_step: NextTool | None


def _shell_view(runtime: Runtime, session_id: str, stored: dict[str, Any] | None) -> ShellView | None:
    shell = live_shell(runtime, session_id)
    meta = shell_meta(runtime, session_id) if shell is not None else None
    source = meta if meta is not None else stored
    if source is None:
        return None
    current = None
    if shell is not None and shell.current is not None and shell.busy and shell.current.id != INTERNAL_JOB:
        current = job_view(runtime.guard, shell.current)
    return ShellView(
        shell_id=source["shellId"],
        shell_path=source["shellPath"],
        status="active" if shell is not None else "closed",
        live=shell is not None,
        mount_path=source.get("mountPath", "/workspace"),
        cwd=source["cwd"],
        started_at=source["startedAt"],
        updated_at=source["updatedAt"],
        last_command_at=source.get("lastCommandAt"),
        command_count=source.get("commandCount", 0),
        busy=shell is not None and shell.busy,
        current_command=current,
        env_keys=source.get("envKeys", []),
    )


class ShellBrief(WireModel):
    shell_id: str
    status: Literal["active", "closed"]
    cwd: str
    busy: bool


class ShellChange(WireModel):
    """A shell setter's answer: what it changed and where the shell stands now, not the whole posture
    (shell_describe has that; issue 38, item 15)."""

    changed: str = Field(description="What the call changed.")
    cwd: str = Field(description="The session's shell cwd, where the next command runs.")
    env_keys: list[str] = Field(description="The names set with shell_set_env (values not shown).")
    persistent_shell: ShellBrief | None


async def change(runtime: Runtime, tx: Tx, session_id: str, changed: str) -> ShellChange:
    state = await store.get_state(tx, session_id)
    view = _shell_view(runtime, session_id, state.shell)
    brief = None if view is None else ShellBrief(shell_id=view.shell_id, status=view.status, cwd=view.cwd,
                                                 busy=view.busy)  # fmt: skip
    return ShellChange(changed=changed, cwd=state.cwd, env_keys=sorted(state.env), persistent_shell=brief)


async def posture(runtime: Runtime, tx: Tx, session_id: str) -> ShellPosture:
    state = await store.get_state(tx, session_id)
    view = _shell_view(runtime, session_id, state.shell)
    recent = [record_view(runtime, r) for r in await store.recent_commands(tx, session_id, 20)]
    running = [c for c in recent if c.status == "running"]
    seen = {c.command_id for c in running}
    running += [job_view(runtime.guard, j) for j in running_jobs(runtime, session_id) if j.id not in seen]
    busy = bool(running)
    busy_plan = None
    if busy:
        first = running[0]
        busy_plan = BusyPlan(
            tool="shell_wait",
            args={"commandId": first.command_id, "timeoutMs": 1000},
            rationale=f"Command {first.command_id} ({clip(first.command, 80)}) is still running: wait for it, or "
            "read its progress with shell_read_command. Do not start or close shells meanwhile.",
            allowed_tools=READ_TOOLS,
            avoid_tools=AVOID_WHILE_BUSY,
        )
    recovery = None
    if view is None:
        recovery = NextTool(tool="shell_open", args={}, rationale="No persistent shell yet: open one.")
    elif view.status == "closed":
        recovery = NextTool(
            tool="shell_restart",
            args={},
            rationale="The persistent shell recorded for this session has no live process: restart it "
            "(its cwd and the env set with shell_set_env come back; exports made inside it do not).",
        )
    step = None
    if busy_plan is not None:
        step = NextTool(tool=busy_plan.tool, args=busy_plan.args, rationale=busy_plan.rationale)
    finished = [c for c in recent if c.status != "running"]
    return ShellPosture(
        session_id=session_id,
        cwd=view.cwd if view is not None and view.live else state.cwd,
        env_keys=sorted(state.env),
        persistent_shell=view,
        busy=busy,
        running_commands=running,
        last_command=finished[0] if finished else None,
        recent_commands=recent[:RECENT],
        busy_plan=busy_plan,
        recovery_plan=recovery,
        next_step=step,
    )
