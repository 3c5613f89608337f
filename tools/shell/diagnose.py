"""Why a writable-shell command ended with 126 (cannot execute) or 127 (not found) when the sandbox is the cause:
the path outside the shell's domain, and the config key that grants it.

Only on those two exit codes, and cheaply: the program the command names (its first word, and any path the shell's
error message names), looked up as the shell would (relative to the cwd, or on the shell's PATH, then on the
server's own PATH for a program the shell could not see), then what running it needs: the program's real file, a
script's `#!` interpreter, an ELF binary's loader. The first of these outside the domain is named.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

from managed_tools.sandbox.confine import Confinement
from managed_tools.sandbox.grants import READ_KEY

CODES = frozenset({126, 127})
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
NAMED_IN_ERROR = re.compile(r"(?:^|\s)([^\s:]+): (?:[^:\n]*: )?(?:Permission denied|not found|No such file)", re.M)
MAX_CANDIDATES = 4
HEAD_BYTES = 4096  # a `#!` line or an ELF header with its program headers fits


def _named(command: str, stderr: str) -> list[str]:
    """The programs the command ran, as written: those the shell's error names, then the first word."""
    names = NAMED_IN_ERROR.findall(stderr)
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    words = [w for w in words if not ASSIGNMENT.match(w)]
    if words:
        names.append(words[0])
    return list(dict.fromkeys(n for n in names if n and not n.startswith("-")))[:MAX_CANDIDATES]


def _locate(name: str, cwd: Path, shell_path: str) -> Path | None:
    """Where the shell would find `name`, else where the server itself would (a tool on the person's PATH)."""
    if "/" in name:
        found = cwd / name
        return found if found.exists() else None
    for search in (shell_path, os.environ.get("PATH", "")):
        hit = shutil.which(name, path=search)
        if hit is not None:
            return Path(hit)
    return None


def _shebang(head: bytes, shell_path: str) -> str | None:
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not line:
        return None
    if os.path.basename(line[0]) == "env" and len(line) > 1:
        program = next((w for w in line[1:] if not w.startswith("-")), None)
        found = None if program is None else shutil.which(program, path=shell_path + os.pathsep + os.environ["PATH"])
        return found
    return line[0]


def _elf_interpreter(head: bytes) -> str | None:
    """PT_INTERP of a 64-bit little-endian ELF file (the loader the kernel runs first)."""
    if not head.startswith(b"\x7fELF\x02\x01"):
        return None
    (phoff,) = struct.unpack_from("<Q", head, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
    for index in range(phnum):
        at = phoff + index * phentsize
        if at + 0x28 > len(head):
            return None
        kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", head, at)
        if kind == 3 and offset + size <= len(head):  # PT_INTERP
            return head[offset : offset + size].rstrip(b"\0").decode(errors="replace")
    return None


def _needs(program: Path, shell_path: str) -> Iterator[tuple[str, str]]:
    """(real path, what it is) for the program and what the kernel runs to start it."""
    real = os.path.realpath(program)
    yield real, f"{program}" if real == str(program) else f"{program} (which is {real})"
    try:
        with open(real, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return
    interpreter = _shebang(head, shell_path) or _elf_interpreter(head)
    if interpreter:
        yield os.path.realpath(interpreter), f"{interpreter}, the interpreter of {program}"


def sandbox_note(confinement: Confinement, command: str, cwd: Path, stderr: str) -> str | None:
    """One line naming the path outside the shell's domain that stopped the command, and how to grant it."""
    if confinement.mode != "landlock":
        return None
    for name in _named(command, stderr):
        program = _locate(name, cwd, confinement.shell_path)
        if program is None:
            continue
        for real, what in _needs(program, confinement.shell_path):
            if confinement.shell_runs(real) or confinement.grants.protects(real):
                continue
            where = os.path.dirname(real)
            where = os.path.dirname(where) if os.path.basename(where) == "bin" else where  # the install, not bin/
            return (
                f"[managed-tools] {what} lies outside the shell's sandbox, so it cannot run there. A person can "
                f"grant it read and execute with config {READ_KEY} (its install directory, e.g. {where}) and "
                "restart the server; a virtualenv made since the server started is granted at its next start."
            )
    return None
