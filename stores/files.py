"""File primitives for the mounted filesystem: bounded reads, binary detection, atomic writes.

Writes go to a temporary file created exclusively (O_EXCL, O_NOFOLLOW) in the target's directory, are flushed
and fsynced, then renamed over the target: a reader sees the old file or the new one, never half of it, and a
symlink standing where the file goes is replaced, never followed.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from stores.errors import StoreError

BINARY_SNIFF_BYTES = 8192
CHUNK = 1 << 20


class FileError(StoreError):
    """A file operation that cannot be done as asked; the message says why."""


def sniff_binary(path: Path) -> bool:
    """True for files that look binary: a NUL byte in the first 8 KiB (what git and ripgrep check)."""
    with open(path, "rb") as handle:
        return b"\x00" in handle.read(BINARY_SNIFF_BYTES)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_limited(path: Path, max_bytes: int) -> tuple[bytes, bool]:
    """At most `max_bytes` of the file, and whether there was more; never loads a huge file whole."""
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    return data[:max_bytes], len(data) > max_bytes


def read_text(path: Path, max_bytes: int, label: str) -> bytes:
    """The whole file, refused unless it is UTF-8 text of at most `max_bytes` (`label` names it in messages)."""
    if not path.is_file():
        raise FileError(f"{label} is not a regular file.")
    data, more = read_limited(path, max_bytes)
    if more:
        raise FileError(f"{label} is larger than {max_bytes} bytes; only text files up to that size are handled.")
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise FileError(f"{label} looks binary (it contains NUL bytes); only text files are handled.")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileError(f"{label} is not UTF-8 text (bad byte at offset {exc.start}); only text is handled.") from None
    return data


def replace_file(path: Path, data: bytes, previous: bytes | None) -> Callable[[], None]:
    """`atomic_write`, returning its undo: put `previous` back, or, when there was no file (`previous` is None),
    remove the new one and the directories this write created. The caller read `previous` (so bounded it)."""
    created: list[Path] = []  # deepest first
    parent = path.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    try:
        atomic_write(path, data)
    except BaseException:
        _remove_empty(created)
        raise

    def undo() -> None:
        if previous is not None:
            atomic_write(path, previous)
            return
        path.unlink(missing_ok=True)
        _remove_empty(created)

    return undo


def _remove_empty(directories: list[Path]) -> None:
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:  # gone already, or no longer empty: something else lives there now
            break


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace `path` with `data` atomically, creating parent directories; keeps an existing file's permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        raise FileError(f"{path.name} is a directory; a file cannot be written there.")
    if mode is None:
        try:
            mode = os.lstat(path).st_mode & 0o777 if not path.is_symlink() else 0o644
        except FileNotFoundError:
            mode = 0o644
    temp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
