"""Read-first alternatives to a shell command (reference §6): the first-class rewrites (`cat f` → `read`, `ls` →
`glob`, `grep` → `grep`, ...) and the read-only `bash` form, so a model reaches for a tool that needs no approval.

Only simple commands are projected: plain tokens, no shell syntax, no leading `VAR=`. Anything else gets none.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable
from typing import Any

from managed_tools.stores.approvals import ApprovalRecord
from managed_tools.tools.framework.wire.models import NextTool
from managed_tools.tools.shell import git
from managed_tools.tools.shell.argv import flags_allowed
from managed_tools.tools.shell.posture import ShellPosture

SHELL_SYNTAX = re.compile(r"[|&;<>$`\n(){}\\]")
LS_FLAGS = re.compile(r"^-[Aal1hF]+$")
GREP_FLAGS = re.compile(r"^-[niFrRIHs]+$")
RG_FLAGS = re.compile(r"^-[niFS]+$")
SHELL_COMMANDS = frozenset({"shell_run", "shell_exec"})


def _tokens(command: str) -> list[str] | None:
    if SHELL_SYNTAX.search(command):
        return None
    try:
        tokens = shlex.split(command)
    except ValueError:
        return None
    if not tokens or "=" in tokens[0]:
        return None
    return tokens


def _path(cwd: str, path: str) -> str:
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(cwd, path))


def _step(tool: str, args: dict[str, Any], command: str) -> NextTool:
    return NextTool(tool=tool, args=args, rationale=f"`{command[:80]}` only reads: {tool} does it without approval.")


def first_class(command: str, cwd: str) -> NextTool | None:
    tokens = _tokens(command)
    if tokens is None:
        return None
    name, rest = tokens[0], tokens[1:]
    args = _project(name, rest, cwd)
    return None if args is None else _step(args[0], args[1], command)


def _project(name: str, rest: list[str], cwd: str) -> tuple[str, dict[str, Any]] | None:
    if name == "cat" and len(rest) == 1 and not rest[0].startswith("-"):
        return "read", {"path": _path(cwd, rest[0])}
    if name in ("head", "tail"):
        return _head_tail(name, rest, cwd)
    if name == "sed" and len(rest) == 3 and rest[0] == "-n":
        match = re.fullmatch(r"(\d+),(\d+)p", rest[1])
        if match and 1 <= int(match[1]) <= int(match[2]):
            start, end = int(match[1]), int(match[2])
            return "read", {"path": _path(cwd, rest[2]), "startLine": start, "lineCount": end - start + 1}
    if name == "wc" and len(rest) == 2 and rest[0] == "-l":
        return "read", {"path": _path(cwd, rest[1]), "lineCount": 1}
    if name == "ls":
        paths = [t for t in rest if not LS_FLAGS.match(t)]
        if len(paths) <= 1 and not any(p.startswith("-") for p in paths):
            return "glob", {"path": _path(cwd, paths[0] if paths else "."), "pattern": "*", "limit": 80}
    if name == "find":
        return _find(rest, cwd)
    if name in ("grep", "rg"):
        return _grep(name, rest, cwd)
    return None


def _head_tail(name: str, rest: list[str], cwd: str) -> tuple[str, dict[str, Any]] | None:
    count = 10
    if len(rest) == 3 and rest[0] == "-n" and rest[1].isdigit():
        count, rest = int(rest[1]), rest[2:]
    elif len(rest) == 2 and re.fullmatch(r"-n?\d+", rest[0]):
        count, rest = int(rest[0].lstrip("-n")), rest[1:]
    if len(rest) != 1 or rest[0].startswith("-") or count < 1:
        return None
    key = "lineCount" if name == "head" else "tailLines"
    return "read", {"path": _path(cwd, rest[0]), key: count}


def _find(rest: list[str], cwd: str) -> tuple[str, dict[str, Any]] | None:
    root = "."
    if rest and not rest[0].startswith("-"):
        root, rest = rest[0], rest[1:]
    options: dict[str, str] = {}
    while rest:
        if len(rest) < 2 or rest[0] not in ("-type", "-name") or rest[0] in options:
            return None
        options[rest[0]], rest = rest[1], rest[2:]
    if "-name" not in options or options.get("-type", "f") not in ("f", "d"):
        return None
    args: dict[str, Any] = {"path": _path(cwd, root), "pattern": "**/" + options["-name"]}
    if "-type" in options:
        args["kind"] = "file" if options["-type"] == "f" else "directory"
    args["limit"] = 80
    return "glob", args


def _grep(name: str, rest: list[str], cwd: str) -> tuple[str, dict[str, Any]] | None:
    flags = GREP_FLAGS if name == "grep" else RG_FLAGS
    letters = "".join(t[1:] for t in rest if t.startswith("-") and flags.match(t))
    words = [t for t in rest if not (t.startswith("-") and flags.match(t))]
    if not 1 <= len(words) <= 2 or any(w.startswith("-") for w in words):
        return None
    args: dict[str, Any] = {"path": _path(cwd, words[1] if len(words) == 2 else "."), "query": words[0]}
    args["limit"] = 20 if name == "grep" else 40
    if "F" not in letters:
        args["regex"] = True
    args["caseSensitive"] = "i" not in letters
    return "grep", args


def read_only_bash(command: str, cwd: str) -> NextTool | None:
    """The same command as `bash` when it is an allowlisted program with plain arguments and allowed flags."""
    tokens = _tokens(command)
    if tokens is None:
        return None
    if not (git.allowed(tokens[1:]) if tokens[0] == "git" else flags_allowed(tokens[0], tokens[1:])):
        return None
    return NextTool(
        tool="bash",
        args={"command": tokens[0], "args": tokens[1:], "cwd": cwd},
        rationale=f"`{command[:80]}` is a read-only allowlisted program: bash runs it without a shell and "
        "without approval.",
    )


def alternatives(command: str, cwd: str) -> list[NextTool]:
    found = [first_class(command, cwd), read_only_bash(command, cwd)]
    return [step for step in found if step is not None]


def read_first_menu(shell: ShellPosture, preferred: NextTool | None = None) -> list[NextTool]:
    """The reference's short menu of safer moves before changing the shell: the first-class rewrite of the planned
    command (when there is one), the shell's posture, `bash pwd` in its cwd, and its last output when it has one
    (or a command is running)."""
    menu = [] if preferred is None else [preferred]
    menu += [
        NextTool(tool="shell_describe", args={}, rationale="See the shell's cwd, env and last commands first."),
        NextTool(
            tool="bash",
            args={"command": "pwd", "cwd": shell.cwd},
            rationale="Confirm the working directory with the read-only hand, no approval needed.",
        ),
    ]
    if shell.last_command is not None or shell.busy_plan is not None:
        menu.append(
            NextTool(
                tool="shell_read_last_output",
                args={},
                rationale="Read the last command's output before deciding another shell change is needed.",
            )
        )
    return menu


def planned_command(tool_args: dict[str, Any] | None) -> str:
    """The command a shell_run/shell_exec call (or its pending approval) would run, or ""."""
    command = (tool_args or {}).get("command")
    return command if isinstance(command, str) else ""


def planned_cwd(tool_args: dict[str, Any], shell: ShellPosture) -> str:
    cwd = tool_args.get("cwd")
    if not isinstance(cwd, str) or not cwd.strip():
        return shell.cwd
    return posixpath.normpath(cwd if cwd.startswith("/") else posixpath.join("/workspace", cwd))


def pending_shell_command(records: Iterable[ApprovalRecord], shell: ShellPosture) -> tuple[str, str] | None:
    """(command, cwd) of the first shell command waiting for a person's approval, or None."""
    for record in records:
        if record.status == "pending" and record.tool_name in SHELL_COMMANDS and planned_command(record.arguments):
            return planned_command(record.arguments), planned_cwd(record.arguments, shell)
    return None
