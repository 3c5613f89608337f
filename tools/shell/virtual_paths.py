"""Virtual paths in shell command text (`cd /workspace/docs && ls`), mapped to where the mounts really are.

A shell sees the machine's real layout, while every tool (and the virtualized output, so `pwd` prints
`/workspace`) speaks the virtual one. Before a `shell_run` or `shell_exec` command runs, each virtual path written
in it as a path of its own is mapped, as the reference does:

- only a mount path standing alone is one: after the start or a separator (space, quote, `=`, `:`, `;`, `|`, `&`,
  `<`, `>`, `(`, `,`, backtick) and before the end, a `/` or such a separator, so `/workspacefoo`,
  `~/workspace`, `$HOME/workspace` or `/workspace.bak` are left as they are;
- the literal path that follows (up to the first space, quote or shell-special character) goes through the path
  guard first: a `..` climbing out, a symbolic link leading out of its mount, or the server's data dir refuse the
  whole command, so a mapping never manufactures an escape (the kernel's confinement still bounds the shell);
- only the mount prefix is replaced, never the rest: a symbolic link inside a mount stays a link to the command;
- a mount whose real path holds a character a shell could read specially (anything but letters, digits and
  `_ . / + @ % , : -`) is not mapped by text, whatever the quoting around it: naming it is refused with a hint.

The person approves the command as the model wrote it; the mapping is a fixed function of it and the mounts.
"""

from __future__ import annotations

import os
import re

from managed_tools.sandbox.paths import PathError, PathGuard
from managed_tools.tools.framework.wire.errors import ToolError

_BEFORE = r"(?<![^\s'\"=:;|&<>(,`])"  # the start, or one of these before it
_AFTER = r"(?![^/\s'\"=:;|&<>),`])"  # the end, or one of these after it
_LITERAL = re.compile(r"[^\s'\"=:;|&<>(),`$\\{}*?\[\]!#~]*")
SAFE_ROOT = re.compile(r"^[A-Za-z0-9_./+@%,:-]+$")


def _pattern(guard: PathGuard) -> re.Pattern[str]:
    names = "|".join(re.escape(m.mount_path) for m in guard.mounts)  # longest first: /workspace/agent wins
    return re.compile(f"{_BEFORE}({names}){_AFTER}")


def map_virtual_paths(guard: PathGuard, command: str) -> str:
    """`command` with every standalone virtual path's mount prefix replaced by the mount's real root."""
    roots = {m.mount_path: os.path.realpath(m.root) for m in guard.mounts}
    out: list[str] = []
    at = 0
    for found in _pattern(guard).finditer(command):
        mount_path = found.group(1)
        literal = _LITERAL.match(command, found.start())
        path = literal.group(0) if literal else mount_path
        try:
            guard.resolve(path, "list")
        except PathError as exc:
            raise ToolError(f"{path} in the command: {exc} Nothing ran.") from None
        root = roots[mount_path]
        if not SAFE_ROOT.match(root):
            raise ToolError(
                f"{mount_path} cannot be mapped into the command text on this machine (its real location holds "
                "characters a shell reads specially). Use the cwd argument and paths relative to it. Nothing ran."
            )
        out += [command[at : found.start()], root]
        at = found.end()
    out.append(command[at:])
    return "".join(out)
