"""Why a writable-shell command (or an upstream's program) ended with 126 (cannot execute) or 127 (not found) when
the sandbox is the cause: the path outside the domain, the install to grant and the config line that grants it.
A manager's shim is never suggested (the sandbox runs the install it selects), nor the server's own virtualenv.

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
from collections.abc import Callable, Iterator
from pathlib import Path

from managed_tools.sandbox.confine import Confinement
from managed_tools.sandbox.grants import Grants, config_line, own_venv
from managed_tools.sandbox.paths import inside

CODES = frozenset({126, 127})
NOTE = "[managed-tools]"
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


def _server_path() -> str:
    """The server's own PATH less its own virtualenv, which no spawned program is ever given."""
    own = own_venv()
    entries = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(e for e in entries if own is None or not inside(os.path.realpath(e), own))


def _locate(name: str, cwd: Path, shell_path: str) -> Path | None:
    """Where the shell would find `name`, else where the server itself would (a tool on the person's PATH)."""
    if "/" in name:
        found = cwd / name
        return found if found.exists() else None
    for search in (shell_path, _server_path()):
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
        found = None if program is None else shutil.which(program, path=shell_path + os.pathsep + _server_path())
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


def _install(real: str, grants: Grants) -> str:
    """The directory to grant for the file `real`: its install (the parent of its bin/), or the bin/ itself where
    the install holds a denied or protected place (~/.local holds keyrings), which a grant must never reach."""
    where = os.path.dirname(real)
    if os.path.basename(where) == "bin":
        install = os.path.dirname(where)
        if not any(inside(never, install) for never in grants.protected):
            return install
    return where


def _shim_note(program: Path, name: str, grants: Grants) -> str | None:
    shims = next((s for s in grants.shims if inside(os.path.realpath(program), s.dir)), None)
    if shims is None:
        return None
    bins = ", ".join(str(b) for b in shims.bins) or "none: it selects no install found here"
    return (
        f"{NOTE} {program} is a {shims.manager} shim, which the sandbox never runs: it runs the installs the shim "
        f"would select, directly (here: {bins}). Select a version that holds {name} ({shims.manager}'s global "
        f"version, or the workspace's .tool-versions) and restart the server."
    )


def program_note(names: list[str], cwd: Path, *, runs: Callable[[str], bool], grants: Grants, search: str,
                 domain: str = "the shell's sandbox") -> str | None:  # fmt: skip
    """One line naming the path outside `domain` that stopped the first of `names` that can be found, the install
    to grant and the config line that grants it (never a shims dir, never a protected place)."""
    for name in names:
        program = _locate(name, cwd, search)
        if program is None:
            own = own_venv()  # the first word (last of `names`), found only where the server itself runs from
            if own is not None and name == names[-1] and shutil.which(name, path=str(own / "bin")):
                return (f"{NOTE} {name} is found only in the server's own virtualenv ({own}/bin), which is never "
                        "handed to a spawned program. Give the project a virtualenv of its own (`python3 -m venv "
                        ".venv`): its bin/ goes first on PATH at the server's next start.")  # fmt: skip
            continue
        if (shim := _shim_note(program, name, grants)) is not None:
            return shim
        for real, what in _needs(program, search):
            if runs(real) or grants.protects(real):
                continue
            return (
                f"{NOTE} {what} lies outside {domain}, so it cannot run there. A person can grant its install read "
                f"and execute in config.json ({config_line(_install(real, grants))}) and restart the server; a "
                "virtualenv made since the server started is granted at its next start."
            )
    return None


def sandbox_note(confinement: Confinement, command: str, cwd: Path, stderr: str) -> str | None:
    """Why a writable-shell command could not run, when the sandbox is the cause (see `program_note`)."""
    if confinement.mode != "landlock":
        return None
    return program_note(_named(command, stderr), cwd, runs=confinement.shell_runs, grants=confinement.grants,
                        search=confinement.shell_path)  # fmt: skip
