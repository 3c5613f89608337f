"""The one path guard every file tool goes through (docs/architecture.md §4; peers §2a, §4: CVE-2025-53109/53110).

A path is a virtual path (`/workspace/src/a.py`, `/workspace/agent/SOUL.md`, `/vaults/docs/x`) or one relative to
`/workspace`. It is refused when it is empty, holds a NUL byte, climbs with `..`, names no mount (a host path, or a
look-alike such as `/workspace-evil`), or resolves — through a symlink on the target or on any ancestor, for a
file that exists or one about to be created — outside its mount's root, or into the server's own data directory.
Containment is checked on real paths against `root + separator`, never as a bare prefix. A symbolic link loop is
refused by name. The guard's answer is a check, not a handle: sandbox/fsaccess.py opens the symlink-free path it
returns beneath a descriptor of the root, so a link swapped in after the check fails the open.

`/attachments/<session id>/<attachment id>` is no mount: only `read` takes it, once the caller checked the owner
(tools/framework/context/attachments.py), and `PathGuard.attachment` contains it in the data dir's attachments
directory with no link allowed anywhere under it.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from managed_tools.errors import StoreError
from managed_tools.sandbox import refusal_count
from managed_tools.sandbox.mounts import Mount

MAX_PATH_CHARS = 4096
# read and list follow links; write replaces whatever stands at the path (a link is replaced, never written
# through); modify (edit, append) changes the real file a link points to. Every one is contained.
Access = Literal["read", "list", "write", "modify"]


class PathError(StoreError):
    """A path the file tools refuse; the message names the mount and the rule."""


class PathEscape(PathError):
    """A path that tried to leave its mount (a link out, `..`, another mount, the server's own data): the sandbox's
    refusal, which the executor reports with its own kind (`sandbox_refused`) so a person can see it."""


def _escape(message: str) -> PathEscape:
    """A path that tried to leave its mount: refused, and counted (sandbox/refusal_count.py)."""
    refusal_count.counted("path")
    return PathEscape(message)


@dataclass(frozen=True)
class Resolved:
    mount: Mount
    virtual: str  # "/workspace/src/a.py"
    relative: str  # "src/a.py"; "" for the mount root
    root: str  # the mount root's real path
    real: str  # relative to `root`, symlink-free: where the path leads; for a new file, its real parent + name
    exists: bool

    @property
    def host(self) -> Path:
        """The real path on this machine: for spawning a process there, never for opening (fsaccess does that)."""
        return Path(self.root, self.real) if self.real else Path(self.root)

    @property
    def name(self) -> str:
        return posixpath.basename(self.real)


def inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Component-wise containment of two real paths: `/a/bc` is not inside `/a/b`."""
    path, root = os.fspath(path), os.fspath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _realpath(path: str, virtual: str) -> str:
    """The real path; a link loop (or a chain of links too long to follow) is refused by name. A dangling link
    resolves to where it points, which the containment check then judges."""
    try:
        try:
            return os.path.realpath(path, strict=True)
        except FileNotFoundError:
            return os.path.realpath(path)  # raises too when a link is swapped between the two passes
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathError(
                f"{virtual} goes through a loop of symbolic links (or too many of them); refused."
            ) from None
        if exc.errno == errno.ENAMETOOLONG:
            raise PathError(f"{virtual}: a name in it, or the path it leads to, is too long; refused.") from None
        raise PathError(f"{virtual} cannot be resolved ({exc.strerror}); refused.") from None


ATTACHMENTS = "/attachments"
# An attachment's id and its session's: UUIDs as stores/ids.py makes them, nothing else (no dot, no slash).
_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def valid_id(text: str) -> bool:
    return bool(_ID.match(text))


def attachment_parts(path: str) -> tuple[str, str] | None:
    """(session id, attachment id) of `/attachments/<session id>/<attachment id>`; None for a path elsewhere.
    Anything else under /attachments (`..`, more or fewer parts, an id that is not one) is refused here."""
    text = path.strip() if isinstance(path, str) else ""
    if text != ATTACHMENTS and not text.startswith(ATTACHMENTS + "/"):
        return None
    parts = text[len(ATTACHMENTS) :].strip("/").split("/")
    if len(parts) != 2 or not all(valid_id(part) for part in parts):
        raise PathError(
            f"{path[:200]} is not an attachment path; one is {ATTACHMENTS}/<session id>/<attachment id>, "
            "read-only, as an AttachmentRef's path gives it."
        )
    return parts[0], parts[1]


class PathGuard:
    def __init__(self, mounts: list[Mount], private: list[Path], attachments: Path | None = None) -> None:
        # Longest mount path first, so /workspace/agent wins over /workspace.
        self.mounts = sorted(mounts, key=lambda m: len(m.mount_path), reverse=True)
        self._roots = {m.mount_path: os.path.realpath(m.root) for m in mounts}
        self._private = [os.path.realpath(p) for p in private]
        self._names = ", ".join(m.mount_path for m in sorted(mounts, key=lambda m: m.mount_path))
        # The attachments directory inside the data dir: its parent resolved, itself never (a link there is refused).
        self._attachments = None
        if attachments is not None:
            self._attachments = Mount(
                kind="attachments", mount_path=ATTACHMENTS,
                root=Path(os.path.realpath(attachments.parent), attachments.name), access="read_only",
                scope="agent", prompt="Files tool results attached, per session; read-only.",
            )  # fmt: skip
            self._roots[ATTACHMENTS] = str(self._attachments.root)

    def attachment(self, session_id: str, attachment_id: str) -> Resolved:
        """The stored file of one attachment (its owner already checked): beneath the attachments directory,
        reached through no symbolic link at all, never the rest of the data dir."""
        if self._attachments is None or not (valid_id(session_id) and valid_id(attachment_id)):
            raise PathError("No such attachment.")
        relative = f"{session_id}/{attachment_id}"
        resolved = self._contain(self._attachments, relative, "read")
        if resolved.real != relative:
            raise PathError(f"{resolved.virtual}: a symbolic link is in the way; attachments are never links.")
        return resolved

    @property
    def private(self) -> list[Path]:
        """The real paths no tool may reach (the data dir, an old one left in the workspace)."""
        return [Path(p) for p in self._private]

    def resolve(self, path: str, access: Access = "read") -> Resolved:
        mount, relative = self._split(path)
        return self._contain(mount, relative, access)

    def _contain(self, mount: Mount, relative: str, access: Access) -> Resolved:
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
            real = _realpath(candidate, virtual)
            if access == "write" and os.path.islink(candidate) and inside(real, root):
                real = os.path.join(_realpath(os.path.dirname(candidate), virtual), os.path.basename(candidate))
        else:
            ancestor = candidate
            while not os.path.lexists(ancestor):
                ancestor = os.path.dirname(ancestor)
            real_ancestor = _realpath(ancestor, virtual)
            if not os.path.isdir(real_ancestor):
                raise PathError(f"{virtual}: a parent of it is a file, not a directory.")
            real = os.path.join(real_ancestor, os.path.relpath(candidate, ancestor))
        if not inside(real, root):
            raise _escape(f"{virtual} resolves outside {mount.mount_path} (through a symbolic link); refused.")
        if mount.kind not in ("agent_substrate", "attachments") and any(inside(real, p) for p in self._private):
            raise _escape(f"{virtual} is inside the server's own data directory, which no tool may reach.")
        inner = "" if real == root else real[len(root.rstrip(os.sep)) + 1 :]
        return Resolved(mount=mount, virtual=virtual, relative=relative, root=root, real=inner, exists=exists)

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
            raise _escape(f"{path} is outside the mounts ({self._names}); use a path inside one of them.")
        rest = text[len(mount.mount_path) :].strip("/")
        parts = [p for p in rest.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise _escape(f"{path} climbs out with '..'; paths must stay inside {mount.mount_path}.")
        return mount, posixpath.join(*parts) if parts else ""
