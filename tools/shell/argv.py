"""`bash`'s argument check: an allowlisted program given only known-good spellings, never parsed by a shell.

No shell sees the input, so `;`, `|`, `$(...)` and newlines are plain characters of one argument. Each argument is
matched against the program's table (tools/shell/flags.py): an exact flag spelling with a valid value, or an
operand. Anything else is refused — abbreviations (`--rec`), unknown letters, obsolete forms (`-5c`), a
dash-leading argument that is not a flag. Operands that are paths are resolved, kept inside the cwd's mount, and
replaced by the real path the guard checked.

The program is then given an argv rebuilt from what was checked, `[binary, canonical flags, "--", operands]`,
with every value glued (`--lines=5`): it cannot parse anything differently from us (option permutation,
optional values, POSIXLY_CORRECT), and it runs with FIXED_ENV, never the session's env.
"""

from __future__ import annotations

import posixpath
import re
import shutil
from dataclasses import dataclass, field

from managed_tools.sandbox.files import require_regular
from managed_tools.sandbox.fsaccess import FileAccessError
from managed_tools.sandbox.paths import PathError, PathGuard, Resolved
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.shell.flags import PROGRAMS, Flag, Program
from managed_tools.tools.shell.runner import SAFE_PATH

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
MAX_ARGS = 64
ALLOWED = (*PROGRAMS, "git")  # git's tables are its own (tools/shell/git_flags.py): subcommands, then flags
# The whole environment of a `bash` program: the session env (shell_set_env) never reaches it, so it can neither
# change how a program parses its arguments (POSIXLY_CORRECT, TIME_STYLE, QUOTING_STYLE) nor be read back by `env`.
FIXED_ENV = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC"}
DASH_HINT = "To name a file that starts with '-', write ./-name or put it after --."


@dataclass(frozen=True)
class Plan:
    binary: str
    argv: list[str]
    cwd: Resolved
    env: dict[str, str] = field(default_factory=lambda: dict(FIXED_ENV))


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


def working_dir(guard: PathGuard, cwd: str, *, in_vault: bool = False, label: str = "cwd") -> Resolved:
    """The directory a program runs in: inside a mount, and a vault only for the programs that only list."""
    try:
        where = guard.resolve(cwd, "list")
    except PathError as exc:
        raise ToolError(f"{label}: {exc}") from None
    if not where.host.is_dir():
        raise ToolError(f"{label} {where.virtual} is not a directory.")
    if where.mount.kind == "vault" and not in_vault:
        vault = [name for name, p in PROGRAMS.items() if p.in_vault]
        raise ToolError(f"{where.mount.mount_path} is a vault: only {' and '.join(vault)} run there.")
    return where


def check_args(args: list[str]) -> None:
    if len(args) > MAX_ARGS:
        raise ToolError(f"At most {MAX_ARGS} arguments.")
    if any("\x00" in arg for arg in args):
        raise ToolError("An argument contains a NUL byte; refused.")


def plan(guard: PathGuard, command: str, args: list[str], cwd: str) -> Plan:
    binary = resolve_binary(command)
    program = PROGRAMS[command]
    where = working_dir(guard, cwd, in_vault=program.in_vault)
    check_args(args)
    if program.operands == "none":
        if args:
            raise ToolError(f"{command} takes no arguments here.")
        return Plan(binary=binary, argv=[binary], cwd=where)
    flags, operands = Parser(command, program, args).parse()
    argv = [binary]
    for flag, value in flags:
        if value is not None and flag.value is not None and flag.value.is_path:
            value = _path(guard, where, value, program.access)  # noqa: PLW2901 (the checked path replaces it)
        argv.append(canonical(flag, value))
    argv.append("--")
    if program.operands == "paths":
        operands = [_path(guard, where, operand, program.access, opened=program.reads) for operand in operands]
    return Plan(binary=binary, argv=argv + operands, cwd=where)


def flags_allowed(command: str, args: list[str]) -> bool:
    """Whether `args` would pass the flag check (paths are checked only when it runs): for suggestions."""
    program = PROGRAMS.get(command)
    if program is None or (program.operands == "none" and args):
        return False
    try:
        Parser(command, program, args).parse()
    except ToolError:
        return False
    return True


def canonical(flag: Flag, value: str | None) -> str:
    """The one spelling the program is given: the long name with its value glued, else the short letter with
    its value glued (`-L1,5`: git blame's -L has no long name)."""
    if not flag.long:
        return f"-{flag.short}" + ("" if value is None else value)
    return f"--{flag.long[0]}" + ("" if value is None else f"={value}")


class Parser:
    """Splits `args` into (flag, value) pairs and operands, the way GNU getopt_long would for these tables —
    minus abbreviations, obsolete forms and anything not in the table, which are refused."""

    def __init__(self, command: str, program: Program, args: list[str]) -> None:
        self.command, self.program, self.args = command, program, args
        self.shorts = {f.short: f for f in program.flags if f.short}
        self.longs = {name: f for f in program.flags for name in f.long}
        self.index = 0
        self.before_dashes: int | None = None  # how many operands came before `--`, when it was given

    def parse(self) -> tuple[list[tuple[Flag, str | None]], list[str]]:
        flags: list[tuple[Flag, str | None]] = []
        operands: list[str] = []
        while self.index < len(self.args):
            arg = self.args[self.index]
            self.index += 1
            if arg == "--":
                self.before_dashes = len(operands)
                operands += self.args[self.index :]
                break
            if not arg.startswith("-"):
                operands.append(arg)
            elif arg.startswith("--"):
                flags.append(self._long(arg))
            elif self.program.digits and arg[1:].isascii() and arg[1:].isdigit():
                flag = self.longs[self.program.digits]  # head -5 is head --lines=5
                flags.append((flag, self._checked(flag, arg, arg[1:])))
            else:
                flags += self._cluster(arg)
        return flags, operands

    def refuse(self, why: str, *, dash_hint: bool = False) -> ToolError:
        noun = "path" if self.program.operands == "paths" else "name"
        operands = self.program.operands_help or f"any other argument is a {noun}, and so is every argument after --"
        hint = f" {DASH_HINT}" if dash_hint else ""
        return ToolError(
            f"{self.command}: {why}.{hint} {self.command} accepts exactly these flags: {self.program.spellings()}; "
            f"{operands}."
        )

    def _long(self, arg: str) -> tuple[Flag, str | None]:
        name, eq, value = arg[2:].partition("=")
        flag = self.longs.get(name)
        if flag is None:
            raise self.refuse(
                f"{arg[:60]!r} is not an allowed flag; abbreviations are not expanded, use the full name",
                dash_hint=True,
            )
        if flag.value is None:
            if eq:
                raise self.refuse(f"--{name} takes no value")
            return flag, None
        if not eq:
            if flag.optional:
                return flag, None  # `--color ..`: the next argument is an operand, never the value
            value = self._next(f"--{name}")
        return flag, self._checked(flag, f"--{name}", value)

    def _cluster(self, arg: str) -> list[tuple[Flag, str | None]]:
        """`-la`, `-n5`, `-n 5`: letters that take no value, then at most one that takes the rest or the next."""
        if arg == "-":
            raise self.refuse("'-' (standard input) is not allowed", dash_hint=True)
        found: list[tuple[Flag, str | None]] = []
        for at, letter in enumerate(arg[1:], start=2):
            flag = self.shorts.get(letter)
            if flag is None:
                raise self.refuse(f"-{letter} (in {arg[:60]!r}) is not an allowed flag", dash_hint=True)
            if flag.value is None or flag.optional:
                found.append((flag, None))
                continue
            value = arg[at:] or self._next(f"-{letter}")
            found.append((flag, self._checked(flag, f"-{letter}", value)))
            break
        return found

    def _next(self, spelling: str) -> str:
        if self.index >= len(self.args):
            raise self.refuse(f"{spelling} needs a value")
        self.index += 1
        return self.args[self.index - 1]

    def _checked(self, flag: Flag, spelling: str, value: str) -> str:
        assert flag.value is not None
        if not flag.value.check(value):
            raise self.refuse(f"{value[:60]!r} is not a valid value for {spelling}")
        return value


def checked_path(guard: PathGuard, cwd: Resolved, arg: str, access: str) -> Resolved:
    """`arg` resolved by the guard, inside the cwd's mount, or a refusal. `..` is folded lexically first and the
    result checked, so what the program opens is exactly what the guard approved (never `link/..` through a
    symbolic link)."""
    if not arg:
        raise ToolError("An empty argument is not a path.")
    virtual = posixpath.normpath(arg if arg.startswith("/") else posixpath.join(cwd.virtual, arg))
    try:
        resolved = guard.resolve(virtual, "list" if access == "list" else "read")
    except PathError as exc:
        raise ToolError(f"{arg}: {exc}") from None
    if resolved.mount.mount_path != cwd.mount.mount_path:
        raise ToolError(f"{arg} escapes the mounted root of the cwd ({cwd.mount.mount_path}); refused.")
    return resolved


def _path(guard: PathGuard, cwd: Resolved, arg: str, access: str, *, opened: bool = False) -> str:
    """The real host path of `arg`. A file the program will read (`opened`) must be what `read` reads: a
    regular file, never a FIFO, socket or device."""
    resolved = checked_path(guard, cwd, arg, access)
    if opened and resolved.exists:
        try:
            require_regular(resolved)
        except FileAccessError as exc:
            raise ToolError(str(exc)) from None
    return str(resolved.host)
