"""Processes of the shell hand: one-shot commands and the persistent shell, bounded in time and output.

Every process starts in its own session (`start_new_session=True`), so stopping it means killing its whole
process group: a command that forks children, or a shell with background jobs, leaves nothing behind. Output is
read as it comes (so a flood never blocks the child on a full pipe) and only the first `cap` characters are kept.

A command outlives the call that started it: its pump is a task of its own, and the call only waits on it. When
the call returns early (a long command), `shell_wait` and `shell_read_command` follow the same `Job`; when it ends,
the pump records the result in SQLite, so another process can read it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from managed_tools.sandbox.egress import SOCKET_ENV, Channel, Egress
from managed_tools.sandbox.spawn import Child, Domain, limit_message, spawn
from managed_tools.stores.errors import StoreError
from managed_tools.stores.shell import CommandKind, CommandStatus

log = logging.getLogger("managed_tools.shell")

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
READ_CHUNK = 65536
MAX_TRAILER_BYTES = 4 << 20  # pwd and env after a persistent-shell command; more than this is not an env
DRAIN_AFTER_EXIT = 1.0  # seconds to collect output after the leader exits before leftovers are killed
# Keys of the persistent shell's env that change on their own and say nothing about the session.
TRANSIENT_KEYS = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (our children always lead their own group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class Output:
    """The first `cap` characters of a stream, and how much there was in all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._kept = bytearray()
        self.total_bytes = 0

    def feed(self, data: bytes) -> None:
        self.total_bytes += len(data)
        room = self.cap * 4 - len(self._kept)  # a character is at most 4 bytes of UTF-8
        if room > 0:
            self._kept += data[:room]

    def text(self) -> tuple[str, bool]:
        decoded = self._kept.decode("utf-8", errors="replace")
        truncated = len(decoded) > self.cap or self.total_bytes > len(self._kept)
        if not truncated:
            return decoded, False
        return decoded[: self.cap] + f"\n… [output truncated: {self.total_bytes} bytes in all]", True


@dataclass
class Job:
    """One command, running or done."""

    id: str
    session_id: str
    kind: CommandKind
    command: str
    args: list[str]
    cwd: str
    started_at: str
    stdout: Output
    stderr: Output
    pid: int = 0
    t0: float = field(default_factory=time.monotonic)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    recorded: asyncio.Event = field(default_factory=asyncio.Event)  # its end is in SQLite (or failed to be)
    status: CommandStatus = "running"
    exit_code: int | None = None
    duration_ms: float | None = None
    cancelled: bool = False
    limit: str | None = None  # the sandbox limit that stopped it (a sandbox.limits key), if one did
    network: Channel | None = None  # its way out through the egress proxy, while it runs
    network_blocked: list[str] = field(default_factory=list)  # what the proxy refused it, once it has ended
    unrecorded: str | None = None  # why its end could not be recorded (the state database refused the write)

    def kill(self) -> None:
        """Stop it now (a cancelled call, a closing shell): the pump records it as killed."""
        self.cancelled = True
        if self.pid:
            kill_group(self.pid)

    def elapsed_ms(self) -> float:
        return round((time.monotonic() - self.t0) * 1000, 1)

    def finish(self, status: CommandStatus, exit_code: int | None) -> None:
        if self.cancelled and status != "timed_out":
            status = "killed"
        self.status, self.exit_code, self.duration_ms = status, exit_code, self.elapsed_ms()
        self.done.set()


OnDone = Callable[[Job], Awaitable[None]]
_TASKS: set[asyncio.Task[None]] = set()  # strong references: a pump must not be garbage-collected mid-run


def _spawn_task(coro: Awaitable[None]) -> None:
    async def run() -> None:
        await coro

    task = asyncio.get_running_loop().create_task(run())
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


async def _drain(stream: asyncio.StreamReader, sink: Output) -> None:
    while chunk := await stream.read(READ_CHUNK):
        sink.feed(chunk)
        await asyncio.sleep(0)  # a read from a full buffer never suspends: a flood would starve the timeout


async def start_process(
    job: Job,
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    limit_s: float,
    on_done: OnDone,
    confine: Domain | None,
    egress: Egress | None = None,
) -> None:
    """Start a one-shot process for `job`, confined to `confine` before the program runs (None: argv-only); its
    pump enforces the timeout and calls `on_done` at the end. With `egress` (whose domain `confine` is), its one
    way out of its network namespace is a proxy channel of its own, closed when it ends.

    Shielded: a call cancelled mid-spawn (a stop, a client's cancel) would leave a process that has already
    started but that no one knows the pid of, so no one kills its group; once spawned, a job always has its
    pid and its pump, and a kill reaches it."""
    with anyio.CancelScope(shield=True):
        child, job.network = await _spawn_behind_proxy(
            argv, egress, domain=confine, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL
        )
        job.pid = child.process.pid
        _spawn_task(_pump_process(job, child, limit_s, on_done, confine))


async def _spawn_behind_proxy(
    argv: list[str],
    egress: Egress | None,
    *,
    domain: Domain | None,
    cwd: str,
    env: dict[str, str],
    stdin: int,
) -> tuple[Child, Channel | None]:
    """Spawn `argv` in its own session with piped output; with `egress`, with a proxy channel of its own (the
    domain's bridge reads its socket from the environment), returned, and closed here if the spawn fails."""
    network: Channel | None = None
    if egress is not None:
        network = await egress.open_channel()
        env = {**env, SOCKET_ENV: str(network.path)}
    try:
        child = await spawn(argv, domain=domain, cwd=cwd, env=env, stdin=stdin, stdout=asyncio.subprocess.PIPE,
                            stderr=asyncio.subprocess.PIPE, new_session=True)  # fmt: skip
    except BaseException:
        if network is not None:
            await network.close()
        raise
    return child, network


async def _close_network(job: Job) -> None:
    """Close the job's proxy channel, and say what it refused."""
    if job.network is not None:
        await job.network.close()
        _tell_blocked(job, job.network.blocked())


def _tell_blocked(job: Job, blocked: list[str]) -> None:
    """What the proxy refused `job` goes into its result, and a line into its stderr (which is recorded, so a
    later shell_wait from another process reads it too)."""
    job.network_blocked = blocked
    if blocked:
        job.stderr.feed(f"\n[managed-tools] network blocked: {'; '.join(blocked)}\n".encode())


def note_limit(job: Job, limit: str | None, domain: Domain | None) -> None:
    """A sandbox limit that stopped `job` is said in its result."""
    job.limit = limit
    if limit is not None and domain is not None:
        job.stderr.feed(f"\nmanaged-tools: {limit_message(limit, domain.limits)}.\n".encode())


async def _pump_process(job: Job, child: Child, limit_s: float, on_done: OnDone, domain: Domain | None) -> None:
    proc = child.process
    assert proc.stdout is not None and proc.stderr is not None
    readers = asyncio.ensure_future(asyncio.gather(_drain(proc.stdout, job.stdout), _drain(proc.stderr, job.stderr)))
    status: CommandStatus = "completed" if await _exited(proc, readers, limit_s) else "timed_out"
    # Whatever the leader did, its group goes: children it left running in the background included.
    kill_group(proc.pid)
    await _exited(proc, readers, 2.0)
    # A grandchild that left the group may still hold the pipe; what was read by then is kept.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(readers, DRAIN_AFTER_EXIT)
    await _close_network(job)
    code = proc.returncode
    note_limit(job, child.end(), domain)
    job.finish(status, None if status == "timed_out" or code is None or code < 0 else code)
    await _safely(on_done, job)


async def _exited(proc: asyncio.subprocess.Process, readers: asyncio.Future[Any], limit_s: float) -> bool:
    """Whether the process exited within `limit_s`. Not `proc.wait()`: that also waits for the pipes to close,
    which a background child keeps open. The usual end (EOF on both pipes) is seen at once; else poll."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while proc.returncode is None:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        if not readers.done():
            await asyncio.wait({readers}, timeout=min(0.02, remaining))
        else:
            await asyncio.sleep(min(0.001, remaining))  # EOF came first; the exit status is a moment behind
    return True


async def _safely(on_done: OnDone, job: Job) -> None:
    try:
        await on_done(job)
    except StoreError as exc:  # the database is down, full or gone: said to the caller, never taken for recorded
        job.unrecorded = str(exc)
        log.error("could not record the end of shell command %s: %s", job.id, exc)
    except Exception:
        job.unrecorded = "the state database refused the write."
        log.exception("could not record the end of shell command %s", job.id)
    finally:
        job.recorded.set()


# ---- the persistent shell ------------------------------------------------------------------------------------


def shell_argv() -> list[str]:
    """The user's shell when it is one we know how to drive, else /bin/sh. Never a login or interactive shell,
    and no rc file: a start-up file planted in a mount or HOME must not run with an approved command."""
    configured = os.environ.get("SHELL", "")
    name = os.path.basename(configured)
    if name == "bash" and os.path.isabs(configured) and os.access(configured, os.X_OK):
        return [configured, "--noprofile", "--norc"]
    if name in ("sh", "dash") and os.path.isabs(configured) and os.access(configured, os.X_OK):
        return [configured]
    if name == "zsh" and os.path.isabs(configured) and os.access(configured, os.X_OK):
        return [configured, "-f"]
    return ["/bin/sh"]


@dataclass(frozen=True)
class Trailer:
    exit_code: int | None
    pwd: str
    env_keys: list[str]


def _script(command: str, token: str, cd_to: str | None) -> bytes:
    # `command eval` keeps a syntax error from ending a POSIX shell; </dev/null keeps the command off our pipe;
    # the markers carry the exit status, the new cwd and the env keys back, one random token per command.
    cd = f"cd -- {shlex.quote(cd_to)} && " if cd_to else ""
    return (
        f"{{ {cd}command eval {shlex.quote(command)}\n}} </dev/null\n"
        f"printf '%s:S %s\\n' {token} \"$?\"; pwd; env -0 2>/dev/null; printf '%s:E' {token}; "
        f"printf '%s:S%s:E' {token} {token} >&2\n"
    ).encode()


async def _read_marked(stream: asyncio.StreamReader, token: str, sink: Output) -> bytes | None:
    """Feed `sink` until the start marker; return what lies between the markers (None at EOF)."""
    start, end = f"{token}:S".encode(), f"{token}:E".encode()
    pending, trailer, found = b"", b"", False
    while True:
        chunk = await stream.read(READ_CHUNK)
        await asyncio.sleep(0)  # see _drain
        if not chunk:
            if not found:
                sink.feed(pending)
            return None
        if found:
            trailer += chunk
        else:
            pending += chunk
            at = pending.find(start)
            if at < 0:
                keep = min(len(pending), len(start) - 1)  # a marker may straddle two chunks
                sink.feed(pending[: len(pending) - keep])
                pending = pending[len(pending) - keep :]
                continue
            sink.feed(pending[:at])
            found, trailer = True, pending[at + len(start) :]
        at = trailer.find(end)
        if at >= 0:
            return trailer[:at]
        if len(trailer) > MAX_TRAILER_BYTES:
            return trailer


def _parse_trailer(raw: bytes) -> Trailer:
    head, _, rest = raw.partition(b"\n")
    pwd, _, env = rest.partition(b"\n")
    try:
        code: int | None = int(head.strip())
    except ValueError:
        code = None
    keys = sorted(
        {
            entry.split(b"=", 1)[0].decode(errors="replace")
            for entry in env.split(b"\0")
            if b"=" in entry and entry.split(b"=", 1)[0]
        }
        - TRANSIENT_KEYS
    )
    return Trailer(code, pwd.decode(errors="replace"), keys)


class PersistentShell:
    """One session's long-lived shell. Commands run one at a time; `current` is the one running."""

    def __init__(self, child: Child, argv: list[str], domain: Domain | None, network: Channel | None = None) -> None:
        self.child = child
        self.network = network  # the shell's way out through the egress proxy, for its whole life
        self.proc = child.process
        self.domain = domain
        self.argv = argv
        self.current: Job | None = None
        self.host_pwd: str | None = None
        self.env_keys: list[str] = []
        self.killed = False

    @classmethod
    async def spawn(
        cls, cwd: str, env: dict[str, str], confine: Domain | None, egress: Egress | None = None
    ) -> PersistentShell:
        """Start the shell; with `egress`, with a proxy channel of its own for its whole life."""
        argv = shell_argv()
        child, network = await _spawn_behind_proxy(
            argv, egress, domain=confine, cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE
        )
        shell = cls(child, argv, confine, network)
        shell.host_pwd = cwd
        return shell

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and not self.killed

    @property
    def busy(self) -> bool:
        return self.current is not None and not self.current.done.is_set()

    def kill(self) -> None:
        self.killed = True
        kill_group(self.proc.pid)

    async def start(
        self, job: Job, limit_s: float, on_done: OnDone, cd_to: str | None = None, *, text: str | None = None
    ) -> None:
        """Send `text` (default `job.command`) to the shell; the pump waits for its markers, or kills the shell on
        timeout."""
        assert self.proc.stdin is not None
        token = "__MT_" + secrets.token_hex(8)
        self.current = job
        job.pid = self.proc.pid
        try:
            self.proc.stdin.write(_script(job.command if text is None else text, token, cd_to))
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            self.killed = True
            job.stderr.feed(b"The persistent shell had exited before the command could be sent.")
            job.finish("completed", self.proc.returncode)
            await _safely(on_done, job)
            return
        _spawn_task(self._pump(job, token, limit_s, on_done))

    async def _pump(self, job: Job, token: str, limit_s: float, on_done: OnDone) -> None:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        status: CommandStatus = "completed"
        trailer: bytes | None = None
        try:
            trailer, _ = await asyncio.wait_for(
                asyncio.gather(
                    _read_marked(self.proc.stdout, token, job.stdout), _read_marked(self.proc.stderr, token, job.stderr)
                ),
                limit_s,
            )
        except TimeoutError:
            status = "timed_out"
        if self.network is not None:
            _tell_blocked(job, self.network.take_blocked())
        if trailer is None:
            # Timed out, killed, or the command ended the shell (`exit`): the shell and its group are gone.
            self.kill()
            code = await self.proc.wait()
            await self._close_network()
            note_limit(job, self.child.end(), self.domain)
            job.finish(status, None if status == "timed_out" or code < 0 else code)
        else:
            parsed = _parse_trailer(trailer)
            self.host_pwd, self.env_keys = parsed.pwd or self.host_pwd, parsed.env_keys
            note_limit(job, self.child.limit_hit(parsed.exit_code), self.domain)
            job.finish(status, parsed.exit_code)
        await _safely(on_done, job)

    async def close(self) -> None:
        """Kill the shell and its group: a command running in it is recorded as `killed`."""
        if self.current is not None:
            self.current.cancelled = True
        self.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), 2.0)
        self.child.end()
        await self._close_network()

    async def _close_network(self) -> None:
        if self.network is not None:
            await self.network.close()
            self.network = None
