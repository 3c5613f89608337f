"""Starting a child process, sandboxed or not: the one function every spawn point uses.

A `Domain` is one policy's layers as a child enters them: the Landlock ruleset (an fd the server holds), the
syscall filter (a sealed memfd, sandbox/syscalls.py), the resource limits, the cgroups its spawns get a group in,
and the bubblewrap view around it (sandbox/bwrap.py).

* `launcher`: the child execs mt-confine (sandbox/launcher.c, or its Python twin sandbox/pylauncher.py where no
  compiler is) with the ruleset, filter and cgroup fds passed down; it sets the limits, joins the group, drops
  every capability, confines itself, loads the filter and execs the program. Where bubblewrap works, bwrap runs first
  (namespaces and the mount view) and execs the launcher inside. No `preexec_fn`, so CPython uses vfork
  (`start_new_session` and `pass_fds` keep it: only a preexec_fn, uid/gid/groups changes or `_USE_VFORK = False`
  turn it off in 3.11).
* `preexec`: the child does the same in a `preexec_fn` (sandbox/landlock.py), without bubblewrap (Landlock would
  forbid bwrap's mounts). As confined on the filesystem, but CPython then forks the whole server: ~13 ms a spawn
  here. Used where no launcher could be built.

`spawn` returns a `Child`: its process, and `end()` to call once the process has exited, which says which limit
stopped it (if one did) and ends whatever is left in its cgroup.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import signal
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from managed_tools.sandbox import bwrap, landlock, pylauncher
from managed_tools.sandbox.cgroups import Cgroups, Group
from managed_tools.sandbox.launcher import Launcher
from managed_tools.sandbox.policy import MIB, Limits

Spawn = Literal["launcher", "preexec"]
Stream = int | IO[Any] | None
# How a limit shows in an exit status: a signal the kernel sends at the limit (as -N from a process we ran, or
# 128+N from bwrap or a shell that ran it).
LIMIT_SIGNALS = {int(signal.SIGXCPU): "cpuSeconds", int(signal.SIGXFSZ): "fileSizeMB"}
CGROUP_LIMITS = {"processes": "processes", "memory": "memoryMB"}
LIMIT_UNITS = {"processes": "processes at once", "memoryMB": "MB of memory", "fileSizeMB": "MB per file",
               "cpuSeconds": "CPU seconds per process"}  # fmt: skip


@dataclass(frozen=True)
class Domain:
    """One policy's ruleset fd, syscall filter, limits, cgroups and outer view, and the way children enter them."""

    ruleset: int
    spawn: Spawn
    limits: Limits = field(default_factory=Limits)
    launcher: Launcher | None = None
    view: tuple[str, ...] = ()  # bwrap's argv up to the cwd (sandbox/bwrap.py); empty: no outer layers
    cgroups: Cgroups | None = None
    prefix: tuple[str, ...] = ()  # what the program runs behind, inside every layer (policy.addition.prefix)
    env: tuple[tuple[str, str], ...] = ()  # what the policy adds to every program's environment (addition.env)
    filter: int | None = None  # the seccomp filter's sealed memfd (None: no filter on this system)
    program: bytes | None = None  # the same filter's bytes, for the preexec way

    def rlimits(self) -> tuple[int, int, int]:
        """CPU seconds, file bytes, address-space bytes (0: unlimited). The address space is capped only where no
        memory cgroup is: it also counts what programs reserve and never use (JITs, Go), so it is the cruder one."""
        memory = 0 if self.cgroups is not None and "memory" in self.cgroups.controllers else self.limits.memory_mb
        return self.limits.cpu_seconds, self.limits.file_size_mb * MIB, memory * MIB


@dataclass
class Child:
    """A spawned program and its cgroup."""

    process: asyncio.subprocess.Process
    group: Group | None = None
    _seen: dict[str, int] = field(default_factory=dict)

    def limit_hit(self, code: int | None) -> str | None:
        """The `sandbox.limits` key that stopped a command which ended with exit status `code` (None: none did):
        a cgroup limit met since the last look, else a limit's signal in `code`. A long-lived shell asks once
        per command."""
        if self.group is not None:
            counts = self.group.counts()
            grown = [key for key, count in counts.items() if count > self._seen.get(key, 0)]
            self._seen = counts
            if grown:
                return CGROUP_LIMITS[grown[0]]
        if code is None:
            return None
        return LIMIT_SIGNALS.get(-code if code < 0 else code - 128 if code > 128 else 0)

    def end(self) -> str | None:
        """Once the process has exited: the limit that stopped it (see `limit_hit`), after which nothing it
        started is left in its cgroup."""
        hit = self.limit_hit(self.process.returncode)
        if self.group is not None:
            self.group.end()
        return hit


def limit_message(key: str, limits: Limits) -> str:
    """What a person reads when `key` stopped a command."""
    value = {"processes": limits.processes, "memoryMB": limits.memory_mb, "fileSizeMB": limits.file_size_mb,
             "cpuSeconds": limits.cpu_seconds}[key]  # fmt: skip
    return (f"stopped by the sandbox limit sandbox.limits.{key} = {value} ({LIMIT_UNITS[key]}); a person may raise "
            "it in config.json")  # fmt: skip


def _resolve(program: str, env: dict[str, str]) -> str:
    """What CPython's exec would run for `program`: a name is looked up on the child's PATH."""
    if os.sep in program:
        return program
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return found


async def spawn(
    argv: list[str],
    *,
    domain: Domain | None,
    env: dict[str, str],
    cwd: str | os.PathLike[str] | None = None,
    stdin: Stream = None,
    stdout: Stream = None,
    stderr: Stream = None,
    new_session: bool = False,
) -> Child:
    """Start `argv` inside `domain`'s layers before the program runs (None: unconfined, the argv-only mode)."""
    if domain is None:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=new_session
        )
        return Child(process)
    env = {**env, **dict(domain.env)}
    group = domain.cgroups.create(domain.limits) if domain.cgroups is not None else None
    fds = group.fds if group is not None else []
    cpu, fsize, memory = domain.rlimits()
    program = [*domain.prefix, *argv]
    extra: dict[str, Any] = {}
    if domain.spawn == "launcher":
        assert domain.launcher is not None
        held = (domain.ruleset,) if domain.filter is None else (domain.ruleset, domain.filter)
        argv = [*domain.launcher.argv, str(domain.ruleset), str(domain.filter) if len(held) > 1 else "-",
                f"{cpu},{fsize},{memory}", ",".join(map(str, fds)) or "-", _resolve(program[0], env),
                *program]  # fmt: skip
        if domain.view:
            argv = [*bwrap.command(list(domain.view), os.fspath(cwd) if cwd is not None else "/"), *argv]
        extra["pass_fds"] = (*held, *fds)
    else:
        argv = program
        extra["preexec_fn"] = landlock.restrictor(
            domain.ruleset, domain.program, lambda: pylauncher.limits(cpu, fsize, memory, fds)
        )
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=new_session, **extra
        )
    except BaseException:
        if group is not None:
            group.end()
        raise
    finally:
        if group is not None:
            group.close_fds()
    return Child(process, group)
