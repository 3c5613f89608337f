"""The one path guard every file tool goes through (ARCHITECTURE §4; peers §2a, §4: CVE-2025-53109/53110).

A path is a virtual path (`/workspace/src/a.py`, `/workspace/agent/SOUL.md`, `/vaults/docs/x`) or one relative to
`/workspace`. It is refused when it is empty, holds a NUL byte, climbs with `..`, names no mount (a host path, or a
look-alike such as `/workspace-evil`), or resolves — through a symlink on the target or on any ancestor, for a
file that exists or one about to be created — outside its mount's root, or into the server's own data directory.
Containment is checked on real paths against `root + separator`, never as a bare prefix.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stores.errors import StoreError
from stores.mounts import Mount

MAX_PATH_CHARS = 4096
# read and list follow links; write replaces whatever stands at the path (a link is replaced, never written
# through); modify (edit, append) changes the real file a link points to. Every one is contained.
Access = Literal["read", "list", "write", "modify"]


class PathError(StoreError):
    """A path the file tools refuse; the message names the mount and the rule."""


@dataclass(frozen=True)
class Resolved:
    mount: Mount
    virtual: str  # "/workspace/src/a.py"
    relative: str  # "src/a.py"; "" for the mount root
    host: Path  # the real path, or for a new file its real parent joined with the new name
    exists: bool


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class PathGuard:
    def __init__(self, mounts: list[Mount], private: list[Path]) -> None:
        # Longest mount path first, so /workspace/agent wins over /workspace.
        self.mounts = sorted(mounts, key=lambda m: len(m.mount_path), reverse=True)
        self._roots = {m.mount_path: os.path.realpath(m.root) for m in mounts}
        self._private = [os.path.realpath(p) for p in private]
        self._names = ", ".join(m.mount_path for m in sorted(mounts, key=lambda m: m.mount_path))

    def resolve(self, path: str, access: Access = "read") -> Resolved:
        mount, relative = self._split(path)
        virtual = mount.mount_path + ("/" + relative if relative else "")
        writes = access in ("write", "modify")
        if writes and mount.access != "read_write":
            hint = " Stage it, compare, then promote to change it." if mount.kind == "agent_substrate" else ""
            raise PathError(f"{virtual} is in {mount.mount_path}, which is read-only to the file tools.{hint}")
        if access == "read" and mount.kind == "vault":
            raise PathError(f"{mount.mount_path} is a vault: only listing (pwd, ls) is allowed there.")
        root = self._roots[mount.mount_path]
        candidate = os.path.join(root, relative) if relative else root
        exists = os.path.lexists(candidate)
        if exists:
            real = os.path.realpath(candidate)
            if access == "write" and os.path.islink(candidate) and _inside(real, root):
                real = os.path.join(os.path.realpath(os.path.dirname(candidate)), os.path.basename(candidate))
        else:
            ancestor = candidate
            while not os.path.lexists(ancestor):
                ancestor = os.path.dirname(ancestor)
            real_ancestor = os.path.realpath(ancestor)
            if not os.path.isdir(real_ancestor):
                raise PathError(f"{virtual}: a parent of it is a file, not a directory.")
            real = os.path.join(real_ancestor, os.path.relpath(candidate, ancestor))
        if not _inside(real, root):
            raise PathError(f"{virtual} resolves outside {mount.mount_path} (through a symbolic link); refused.")
        if mount.kind != "agent_substrate" and any(_inside(real, p) for p in self._private):
            raise PathError(f"{virtual} is inside the server's own data directory, which no tool may reach.")
        return Resolved(mount=mount, virtual=virtual, relative=relative, host=Path(real), exists=exists)

    def _split(self, path: str) -> tuple[Mount, str]:
        if not isinstance(path, str) or not path.strip():
            raise PathError("The path is empty; give a path relative to /workspace or a virtual path.")
        if "\x00" in path:
            raise PathError("The path contains a NUL byte; refused.")
        if len(path) > MAX_PATH_CHARS:
            raise PathError(f"The path is longer than {MAX_PATH_CHARS} characters; refused.")
        text = path.strip()
        if not text.startswith("/"):
            text = "/workspace/" + text
        mount = next(
            (m for m in self.mounts if text == m.mount_path or text.startswith(m.mount_path + "/")),
            None,
        )
        if mount is None:
            raise PathError(f"{path} is outside the mounts ({self._names}); use a path inside one of them.")
        rest = text[len(mount.mount_path) :].strip("/")
        parts = [p for p in rest.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise PathError(f"{path} climbs out with '..'; paths must stay inside {mount.mount_path}.")
        return mount, posixpath.join(*parts) if parts else ""
