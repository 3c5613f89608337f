"""`bash`'s argument check: an allowlisted program and its arguments, never parsed by a shell.

Because no shell ever sees the input, `;`, `&&`, `|`, `$(...)`, backticks, `<(...)`, `>` and newlines are plain
characters of one argument; they can only ever name a file, and a file name is checked by the path guard. What
is left to check is the program (a bare allowlisted name, found on a fixed PATH, never the caller's), its flags
(the few that follow, recurse or read a list of files are refused), and every path: resolved against the cwd,
kept inside the cwd's mount, and handed to the program as the real path the guard checked.
"""

from __future__ import annotations

import posixpath
import re
import shutil
from dataclasses import dataclass, field

from stores.paths import PathError, PathGuard, Resolved
from tools.errors import ToolError
from tools.shell_runner import SAFE_PATH

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
MAX_ARGS = 64


@dataclass(frozen=True)
class Spec:
    no_args: bool = False
    value_flags: frozenset[str] = field(default_factory=frozenset)  # the next argument is a value, not a path
    path_flags: frozenset[str] = field(default_factory=frozenset)  # --flag=PATH: the value is a path
    refused: frozenset[str] = field(default_factory=frozenset)  # long names, or "-x" for a short letter


def _set(*items: str) -> frozenset[str]:
    return frozenset(items)


ALLOWED: dict[str, Spec] = {
    "pwd": Spec(no_args=True),
    "env": Spec(no_args=True),  # `env CMD` would run CMD
    "ls": Spec(
        value_flags=_set(
            *("-I", "-w", "-T", "--hide", "--ignore", "--width", "--tabsize", "--format", "--sort", "--time"),
            *("--time-style", "--block-size", "--quoting-style", "--indicator-style", "--color"),
        ),
        refused=_set("-R", "--recursive"),  # would list the server's own data directory inside the workspace
    ),
    "cat": Spec(),
    "head": Spec(value_flags=_set("-n", "-c", "--lines", "--bytes")),
    "tail": Spec(
        value_flags=_set("-n", "-c", "--lines", "--bytes", "-s", "--sleep-interval", "--max-unchanged-stats"),
        refused=_set("-f", "-F", "--follow", "--pid", "--retry"),  # a read must end
    ),
    "wc": Spec(refused=_set("--files0-from")),  # reads a list of paths the guard never sees
    "basename": Spec(value_flags=_set("-s", "--suffix")),
    "dirname": Spec(),
    "realpath": Spec(path_flags=_set("--relative-to", "--relative-base")),
    "stat": Spec(value_flags=_set("-c", "--format", "--printf")),
}
VAULT_ALLOWED = ("pwd", "ls")


@dataclass(frozen=True)
class Plan:
    binary: str
    argv: list[str]
    cwd: Resolved


def resolve_binary(command: str) -> str:
    if not NAME.match(command) or command not in ALLOWED:
        raise ToolError(
            f"bash runs only these programs, by bare name: {', '.join(ALLOWED)}. {command[:40]!r} is not one of "
            "them (no paths, no shell syntax); use shell_run for anything else (it asks a person first)."
        )
    found = shutil.which(command, path=SAFE_PATH)
    if found is None:
        raise ToolError(f"{command} is not installed on this machine.")
    return found


def plan(guard: PathGuard, command: str, args: list[str], cwd: str) -> Plan:
    binary = resolve_binary(command)
    spec = ALLOWED[command]
    try:
        where = guard.resolve(cwd, "list")
    except PathError as exc:
        raise ToolError(f"cwd: {exc}") from None
    if not where.host.is_dir():
        raise ToolError(f"cwd {where.virtual} is not a directory.")
    if where.mount.kind == "vault" and command not in VAULT_ALLOWED:
        raise ToolError(f"{where.mount.mount_path} is a vault: only {' and '.join(VAULT_ALLOWED)} run there.")
    if spec.no_args and args:
        raise ToolError(f"{command} takes no arguments here.")
    if len(args) > MAX_ARGS:
        raise ToolError(f"At most {MAX_ARGS} arguments.")
    access = "list" if command == "ls" else "read"
    argv: list[str] = [binary]
    expect_value, only_paths = False, False
    for arg in args:
        if "\x00" in arg:
            raise ToolError("An argument contains a NUL byte; refused.")
        if expect_value:
            argv.append(arg)
            expect_value = False
        elif arg == "-":
            argv.append(arg)  # stdin, which is /dev/null
        elif only_paths or not arg.startswith("-"):
            argv.append(_path(guard, where, arg, access))
        elif arg == "--":
            argv.append(arg)
            only_paths = True
        elif arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name in spec.refused:
                raise ToolError(f"{command} {name} is refused here.")
            if name in spec.path_flags and eq:
                argv.append(f"{name}={_path(guard, where, value, access)}")
            elif name in spec.path_flags:
                raise ToolError(f"Give {name} its path as {name}=PATH.")
            else:
                argv.append(arg)
                expect_value = name in spec.value_flags and not eq
        else:
            argv.append(arg)
            expect_value = _short_cluster(command, spec, arg)
    if expect_value:
        raise ToolError(f"{args[-1]} needs a value.")
    return Plan(binary=binary, argv=argv, cwd=where)


def _short_cluster(command: str, spec: Spec, arg: str) -> bool:
    """Check `-abc`; True when its last letter takes the next argument as its value."""
    if arg[1:].isdigit():  # `head -5`
        return False
    for i, letter in enumerate(arg[1:], start=1):
        flag = "-" + letter
        if flag in spec.refused:
            raise ToolError(f"{command} {flag} is refused here.")
        if flag in spec.value_flags:
            return i == len(arg) - 1  # `-n5` carries its value; `-n 5` takes the next argument
    return False


def _path(guard: PathGuard, cwd: Resolved, arg: str, access: str) -> str:
    """The real host path of `arg`, or a refusal. `..` is folded lexically first and the result checked, so
    what the program opens is exactly what the guard approved (never `link/..` through a symlink)."""
    if not arg:
        raise ToolError("An empty argument is not a path.")
    virtual = posixpath.normpath(arg if arg.startswith("/") else posixpath.join(cwd.virtual, arg))
    try:
        resolved = guard.resolve(virtual, "list" if access == "list" else "read")
    except PathError as exc:
        raise ToolError(f"{arg}: {exc}") from None
    if resolved.mount.mount_path != cwd.mount.mount_path:
        raise ToolError(f"{arg} escapes the mounted root of the cwd ({cwd.mount.mount_path}); refused.")
    return str(resolved.host)
