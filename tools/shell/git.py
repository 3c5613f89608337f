"""`bash git`: the read-only git commands a coding agent runs most, in the read-only hand's domain.

This module checks what the model wrote: git's options before the subcommand (only `-C DIR` moves anything), the
subcommand and its flags against the allowlist of tools/shell/git_flags.py (parsed like every `bash` program),
revisions, and paths through the path guard. The argv git gets is rebuilt from that, `git --no-pager SUB forced
flags revisions -- paths`: with the explicit `--`, git takes what precedes it as revisions only, so no operand
can turn `diff` into `--no-index` of two host files. The flags every run gets (`--no-ext-diff`, `--no-textconv`,
`--ignore-submodules=all`, `branch --list`) are in the tables. tools/shell/git_repository.py finds and checks the
repository and makes the environment.
"""

from __future__ import annotations

import os
import posixpath

from managed_tools.sandbox.paths import PathGuard, Resolved
from managed_tools.sandbox.spawn import Domain
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.shell import git_repository
from managed_tools.tools.shell.argv import (
    Parser,
    Plan,
    canonical,
    check_args,
    checked_path,
    resolve_binary,
    working_dir,
)
from managed_tools.tools.shell.flags import Flag
from managed_tools.tools.shell.git_flags import GLOBAL_FLAGS, REVISION, SUBCOMMANDS


def allowed(args: list[str]) -> bool:
    """Whether `git ARGS` would pass the flag check (paths and the repository are checked only when it runs)."""
    try:
        _, name, rest = _globals(args)
        _flags(name, rest)
    except ToolError:
        return False
    return True


async def plan(guard: PathGuard, domain: Domain | None, args: list[str], cwd: str) -> Plan:
    binary = resolve_binary("git")
    where, argv = checked(guard, args, cwd)
    repo = await git_repository.find(binary, guard, where, domain)
    return Plan(binary=binary, argv=[binary, *argv], cwd=where, env=git_repository.environment(where, repo))


def checked(guard: PathGuard, args: list[str], cwd: str) -> tuple[Resolved, list[str]]:
    """The directory git runs in, and its argv after the binary: `--no-pager SUB forced flags revisions -- paths`,
    each piece checked; the repository itself is not looked at yet."""
    check_args(args)
    directory, name, rest = _globals(args)
    where = working_dir(guard, cwd)
    if directory is not None:
        where = working_dir(guard, posixpath.normpath(posixpath.join(where.virtual, directory)), label="git -C")
    sub = SUBCOMMANDS[name]
    flags, operands, before = _flags(name, rest)
    revisions, paths = _operands(guard, where, name, operands, before)
    given = [canonical(flag, value) for flag, value in flags]
    forced = list(sub.forced)
    if name == "branch" and "--show-current" in given:
        if operands:
            raise ToolError("git branch --show-current takes no patterns.")
        forced = []  # --show-current is its own mode: with --list git refuses both
    argv = ["--no-pager", name, *forced, *given, *revisions]
    if sub.operands != "revisions":
        argv += ["--", *paths]  # rev-parse would print a `--`; its operands are revisions only
    return where, argv


def _globals(args: list[str]) -> tuple[str | None, str, list[str]]:
    """git's own options before the subcommand, the subcommand, and what follows it."""
    directory = None
    index = 0
    while index < len(args) and args[index].startswith("-"):
        arg = args[index]
        if arg == "-C" and index + 1 < len(args):
            directory = args[index + 1]
            index += 2
        elif arg in ("--no-pager", "-P", "--no-optional-locks"):
            index += 1  # in force on every run anyway
        else:
            raise ToolError(
                f"git: {arg[:60]!r} is not an allowed option before the subcommand; these are: "
                f"{', '.join(GLOBAL_FLAGS)}. No -c, --git-dir, --work-tree or --exec-path: git's config and "
                "repository are fixed."
            )
    name = args[index] if index < len(args) else ""
    if name not in SUBCOMMANDS:
        shown = repr(name[:40]) if name else "no subcommand"
        raise ToolError(
            f"git: {shown} is not one of the read-only subcommands bash runs: {', '.join(SUBCOMMANDS)} (branch "
            "lists only). Use shell_run for anything else (it asks a person first)."
        )
    return directory, name, args[index + 1 :]


def _flags(name: str, rest: list[str]) -> tuple[list[tuple[Flag, str | None]], list[str], int | None]:
    parser = Parser(f"git {name}", SUBCOMMANDS[name].program, rest)
    flags, operands = parser.parse()
    return flags, operands, parser.before_dashes


def _operands(
    guard: PathGuard, where: Resolved, name: str, operands: list[str], before: int | None
) -> tuple[list[str], list[str]]:
    """(revisions, host paths) in the order git is given them."""
    sub = SUBCOMMANDS[name]
    if sub.operands == "paths":
        return [], [_pathspec(guard, where, op) for op in operands]
    if sub.operands == "patterns":
        return [], operands  # branch name patterns; git matches them against refs, never files
    if sub.operands == "revisions":
        if before is not None:
            raise ToolError(f"git {name} takes revisions only, no paths after --.")
        return [_revision(name, op) for op in operands], []
    if sub.operands == "blame":
        if before is None:
            before = len(operands) - 1
        if not operands or before > 1 or len(operands) - before != 1:
            raise ToolError("git blame takes [REV] FILE, or [REV] -- FILE: at most one revision and one file.")
        return [_revision(name, op) for op in operands[:before]], [_pathspec(guard, where, operands[-1])]
    if before is None:  # like git: an operand that names an existing file is a path, anything else a revision
        paths = [op for op in operands if _existing(guard, where, op)]
        return [_revision(name, op) for op in operands if op not in paths], [
            _pathspec(guard, where, op) for op in paths
        ]
    return [_revision(name, op) for op in operands[:before]], [_pathspec(guard, where, op) for op in operands[before:]]


def _revision(name: str, operand: str) -> str:
    if REVISION.fullmatch(operand) is None:
        raise ToolError(
            f"git {name}: {operand[:60]!r} is not a revision this hand takes (none starts with -, / or ., none "
            "holds a control character); put paths after --."
        )
    return operand


def _existing(guard: PathGuard, where: Resolved, operand: str) -> bool:
    try:
        return checked_path(guard, where, operand, "list").exists
    except ToolError:
        return False


def _pathspec(guard: PathGuard, where: Resolved, operand: str) -> str:
    """A path for git, checked by the guard inside the cwd's mount and given as the host path it spells (not the
    target of a link: git tracks a link as itself). Pathspec magic (`:(top)`, `:!x`) is not taken."""
    if operand.startswith(":"):
        raise ToolError(f"{operand[:60]!r}: pathspec magic is not taken; give a plain path or a glob.")
    resolved = checked_path(guard, where, operand, "list")
    return os.path.join(resolved.root, resolved.relative) if resolved.relative else resolved.root
