"""Opening mount paths through descriptors, so a symlink swapped in after the path guard's check cannot lead out.

The guard (sandbox/paths.py) turns a virtual path into a mount root and a symlink-free path relative to it. Every
open here starts from a descriptor of that root and walks the relative path without following any symbolic
link: on Linux with `openat2(2)` and `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, elsewhere
(or where the kernel lacks openat2) one component at a time with `O_NOFOLLOW` and `dir_fd`. A link that appears
between the check and the use therefore fails the open (ELOOP/ENOTDIR/EXDEV) instead of being walked through.

Errors leave as `FileAccessError` naming the virtual path, never an OSError with a host path in it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from managed_tools.errors import StoreError
from managed_tools.sandbox import refusal_count

# struct open_how and the RESOLVE_* bits from <linux/openat2.h>; 437 is openat2 on x86_64 and aarch64.
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
AT_FDCWD = -100
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
# O_PATH opens a directory without reading it (Linux); elsewhere a read-only directory descriptor does.
DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class FileAccessError(StoreError):
    """A mount path that cannot be opened safely or at all; the message names the virtual path only."""


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class _Openat2:
    """The openat2 system call through ctypes, or None where this machine cannot make it."""

    def __init__(self) -> None:
        self._syscall: ctypes._NamedFuncPointer | None = None
        if platform.system() == "Linux" and platform.machine() in ("x86_64", "aarch64"):
            self._syscall = ctypes.CDLL(None, use_errno=True).syscall
            self._syscall.restype = ctypes.c_long
            try:
                os.close(self(AT_FDCWD, ".", DIR_FLAGS))
            except OSError:  # ENOSYS on kernels before 5.6, EPERM under some seccomp filters
                self._syscall = None

    @property
    def available(self) -> bool:
        return self._syscall is not None

    def __call__(self, dir_fd: int, path: str, flags: int, mode: int = 0) -> int:
        assert self._syscall is not None
        how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
        fd = int(self._syscall(SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how)))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return fd


OPENAT2 = _Openat2()


def open_beneath(root: str, relative: str, flags: int, *, walk: bool = False) -> int:
    """A descriptor of `root/relative` opened with `flags`, following no symbolic link on the way or at the end.

    `relative` is symlink-free and holds no `..` (the guard made it so); "" is the root itself. `walk` forces the
    portable component walk (what runs where openat2 does not)."""
    if not relative:
        return os.open(root, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    root_fd = os.open(root, DIR_FLAGS | os.O_NOFOLLOW)
    try:
        if OPENAT2.available and not walk:
            return OPENAT2(root_fd, relative, flags)
        return _walk(root_fd, relative, flags)
    finally:
        os.close(root_fd)


def _walk(root_fd: int, relative: str, flags: int) -> int:
    *parents, name = relative.split("/")
    current = root_fd
    try:
        for part in parents:
            following = os.open(part, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=current)
            if current != root_fd:
                os.close(current)
            current = following
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
    finally:
        if current != root_fd:
            os.close(current)


@contextmanager
def opened(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def make_dirs(root: str, relative: str) -> list[str]:
    """Create the directories of `relative` that are missing, each with mkdirat under its parent's descriptor
    (never following a link); the relative paths of those it created, deepest first."""
    created: list[str] = []
    current = os.open(root, DIR_FLAGS | os.O_NOFOLLOW)
    try:
        done: list[str] = []
        for part in [p for p in relative.split("/") if p]:
            done.append(part)
            try:
                following = os.open(part, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=current)
            except FileNotFoundError:
                try:
                    os.mkdir(part, 0o777, dir_fd=current)
                    created.insert(0, "/".join(done))
                except FileExistsError:  # made by someone else meanwhile: open it like any other
                    pass
                following = os.open(part, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=current)
            os.close(current)
            current = following
    finally:
        os.close(current)
    return created


def refusal(virtual: str, exc: OSError) -> FileAccessError:
    """One clear message for an OSError met on `virtual`: no host path, no traceback."""
    if exc.errno in (errno.ELOOP, errno.EXDEV):  # the kernel stopped a way out of the mount
        refusal_count.counted("path")
    reasons = {
        errno.ELOOP: "a symbolic link is in the way (a link loop, or one put there after the path was checked); "
        "refused",
        errno.EXDEV: "it leads outside its mount; refused",
        errno.ENOTDIR: "a part of it is not a directory (or was replaced by a link after the path was checked)",
        errno.ENAMETOOLONG: "a name in it is too long",
        errno.ENOENT: "it does not exist (any more)",
        errno.EISDIR: "it is a directory",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
        errno.ENXIO: "it is a socket or a device, not a regular file; only regular files are read",
        errno.ENOSPC: "no space left on the device",
        errno.EROFS: "the file system is read-only",
    }
    reason = reasons.get(exc.errno or 0, exc.strerror or type(exc).__name__)
    return FileAccessError(f"{virtual}: {reason}.")


def kind_name(mode: int) -> str:
    """What a non-regular file is, for refusals."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"
