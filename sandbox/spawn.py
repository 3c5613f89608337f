"""Starting a child process, confined or not: the one function every spawn point uses.

A `Domain` is one policy's Landlock ruleset (an fd the server holds) and how a child enters it:

* `launcher`: the child execs mt-confine (sandbox/launcher.py) with the ruleset fd passed down, which confines
  itself and execs the program. No `preexec_fn`, so CPython uses vfork (`start_new_session` and `pass_fds` keep
  it: only a preexec_fn, uid/gid/groups changes or `_USE_VFORK = False` turn it off in 3.11).
* `preexec`: the child confines itself in a `preexec_fn` (sandbox/landlock.py). As confined, but CPython then
  forks the whole server: ~13 ms a spawn here. Used where no launcher could be built.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Literal

Spawn = Literal["launcher", "preexec"]
Stream = int | IO[Any] | None


@dataclass(frozen=True)
class Domain:
    """One policy's ruleset fd and the way children enter it."""

    ruleset: int
    spawn: Spawn
    launcher: str | None = None
    preexec: Callable[[], None] | None = None


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
) -> asyncio.subprocess.Process:
    """Start `argv` entering `domain` before the program runs (None: unconfined, the argv-only mode)."""
    extra: dict[str, Any] = {}
    if domain is not None and domain.spawn == "launcher":
        assert domain.launcher is not None
        argv = [domain.launcher, str(domain.ruleset), _resolve(argv[0], env), *argv]
        extra["pass_fds"] = (domain.ruleset,)
    elif domain is not None:
        extra["preexec_fn"] = domain.preexec
    return await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=new_session, **extra
    )
