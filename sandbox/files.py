"""File primitives for the mounted filesystem, all through descriptors (sandbox/fsaccess.py): bounded reads of
regular files only, listings, stats, directory creation and atomic writes.

Reads open with O_NONBLOCK and refuse at once anything but a regular file (a FIFO, a socket or a device would
block or misbehave), then read in blocking mode. Writes go to a temporary file created exclusively (O_EXCL,
O_NOFOLLOW) under the parent directory's descriptor, are flushed and fsynced, then renamed over the target within
that same directory: a reader sees the old file or the new one, never half of it, and a symlink standing where
the file goes is replaced, never followed.

A write killed before its rename leaves its temporary file behind. Ours are named `.<name>.<nonce><mac>.tmp`, the
mac an HMAC of the nonce and the name under this data dir's key (`use_temp_key`), and are locked (flock) while
written: `remove_stale_temps` removes only files with that name whose mac verifies (never a file of another program
that looks alike) and that no live writer holds.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import posixpath
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import BinaryIO, Literal

from managed_tools.sandbox import fsaccess
from managed_tools.sandbox.fsaccess import DIR_FLAGS, LIST_FLAGS, FileAccessError, open_beneath, opened
from managed_tools.sandbox.paths import Resolved, inside

BINARY_SNIFF_BYTES = 8192
TEMP_NONCE_BYTES = 6
TEMP_MAC_BYTES = 8  # a write's temporary file: `.<name>.<12 + 16 hex digits>.tmp`
# The key that marks this server's temporary files as its own: per process until the runtime sets the data dir's
# (server/runtime/opening.py), so that a later start recognises what a killed one left. Process-wide, as the writes are.
_temp_key = [secrets.token_bytes(32)]


def use_temp_key(key: bytes) -> None:
    _temp_key[0] = key


def _mac(nonce: str, name: str) -> str:
    digest = hmac.new(_temp_key[0], f"{nonce}/{name}".encode(), hashlib.sha256).hexdigest()
    return digest[: 2 * TEMP_MAC_BYTES]


def temp_name(name: str) -> str:
    """A fresh temporary name for a write of `name`, marked as ours."""
    nonce = secrets.token_hex(TEMP_NONCE_BYTES)
    return f".{name}.{nonce}{_mac(nonce, name)}.tmp"


def _ours(entry: str) -> str | None:
    """The target name of one of our temporary files, or None for any other entry."""
    if not (entry.startswith(".") and entry.endswith(".tmp")):
        return None
    name, _, token = entry[1:-4].rpartition(".")
    nonce, mac = token[: 2 * TEMP_NONCE_BYTES], token[2 * TEMP_NONCE_BYTES :]
    if not name or len(token) != 2 * (TEMP_NONCE_BYTES + TEMP_MAC_BYTES) or not _HEX.fullmatch(token):
        return None
    return name if hmac.compare_digest(mac, _mac(nonce, name)) else None


_HEX = re.compile(r"[0-9a-f]+")
FRESH_SECONDS = 2.0
SLEEP_MARGIN = 0.05  # a wait for a file to turn FRESH_SECONDS old ends just past it, not on the boundary
Young = Literal["spare", "wait", "remove"]  # what a sweep does with an unlocked file under FRESH_SECONDS old
CHUNK = 1 << 20


@contextmanager
def refusing(resolved: Resolved) -> Iterator[None]:
    """Turn an OSError met on `resolved` into one clear refusal naming its virtual path."""
    try:
        yield
    except OSError as exc:
        raise fsaccess.refusal(resolved.virtual, exc) from None


def _open_regular(resolved: Resolved) -> int:
    """A non-blocking descriptor of the regular file at `resolved`; anything else is refused at once (opening a
    FIFO this way never waits for a writer)."""
    fd = open_beneath(resolved.root, resolved.real, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise FileAccessError(f"{resolved.virtual} is a directory, not a regular file; use glob to list it.")
        if not stat.S_ISREG(mode):
            kind = fsaccess.kind_name(mode)
            raise FileAccessError(f"{resolved.virtual} is {kind}; only regular files are read (it could block).")
    except BaseException:
        os.close(fd)
        raise
    return fd


def require_regular(resolved: Resolved) -> None:
    """Refuse what `open_read` refuses, for a program that will open the file itself (`bash cat`): a FIFO, a
    socket or a device would hold it until its timeout."""
    with refusing(resolved):
        os.close(_open_regular(resolved))


@contextmanager
def open_read(resolved: Resolved) -> Iterator[BinaryIO]:
    """The regular file at `resolved`, open for reading; anything else is refused without blocking."""
    with refusing(resolved):
        fd = _open_regular(resolved)
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            handle = os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        with handle:
            yield handle


def read_limited(resolved: Resolved, max_bytes: int) -> tuple[bytes, bool]:
    """At most `max_bytes` of the file, and whether there was more; never loads a huge file whole."""
    with open_read(resolved) as handle:
        data = handle.read(max_bytes + 1)
    return data[:max_bytes], len(data) > max_bytes


def read_text(resolved: Resolved, max_bytes: int) -> bytes:
    """The whole file, refused unless it is UTF-8 text of at most `max_bytes`."""
    label = resolved.virtual
    data, more = read_limited(resolved, max_bytes)
    if more:
        raise FileAccessError(f"{label} is larger than {max_bytes} bytes; only text files up to that size are handled.")
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise FileAccessError(f"{label} looks binary (it contains NUL bytes); only text files are handled.")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileAccessError(
            f"{label} is not UTF-8 text (bad byte at offset {exc.start}); only text is handled."
        ) from None
    return data


def sha256_file(resolved: Resolved) -> str:
    digest = hashlib.sha256()
    with open_read(resolved) as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def lstat(resolved: Resolved) -> os.stat_result | None:
    """What stands at the path (a link is reported as a link), or None if nothing does."""
    parent, name = posixpath.split(resolved.real)
    with refusing(resolved):
        if not name:
            with opened(open_beneath(resolved.root, "", DIR_FLAGS)) as fd:
                return os.fstat(fd)
        try:
            with opened(open_beneath(resolved.root, parent, DIR_FLAGS)) as fd:
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None


def is_dir(resolved: Resolved) -> bool:
    info = lstat(resolved)
    return info is not None and stat.S_ISDIR(info.st_mode)


def list_dir(resolved: Resolved) -> list[tuple[str, os.stat_result]]:
    """The directory's entries with their own (not followed) stat, read through the directory's descriptor."""
    with refusing(resolved), opened(open_beneath(resolved.root, resolved.real, LIST_FLAGS)) as fd:
        found: list[tuple[str, os.stat_result]] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    found.append((entry.name, entry.stat(follow_symlinks=False)))
                except FileNotFoundError:  # removed while we looked
                    continue
        return found


def empty_directories(resolved: Resolved, holding: set[str], excluded: list[str], limit: int) -> tuple[list[str], bool]:
    """Directories under `resolved` (relative, as `holding` is) whose whole subtree holds no entry but
    directories: those a file listing cannot show. `holding` are the directories that hold a listed file. A
    directory with any other entry whose files were all left out (ignored) is not reported, nor is anything
    under it, nor `.git` or an `excluded` real path. Walked through descriptors, following no symlink; whether
    more than `limit` entries had to be looked at (then the answer is partial)."""
    found: list[str] = []
    blocked: set[str] = set()
    seen = 0
    with refusing(resolved), opened(open_beneath(resolved.root, resolved.real, LIST_FLAGS)) as fd:
        for top, dirnames, filenames, _ in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            seen += len(dirnames) + len(filenames)
            if seen > limit:
                return [], True
            here = "" if top == "." else top.removeprefix("./")
            dirnames[:] = [
                d for d in dirnames
                if d != ".git" and not any(inside(posixpath.join(resolved.root, resolved.real, here, d), x)
                                           for x in excluded)
            ]  # fmt: skip
            if here and here not in holding:
                if filenames:  # something is here, all of it left out: neither this nor what it holds is empty
                    dirnames[:] = []
                    blocked.update(_ancestors(here))
                    continue
                found.append(here)
    return sorted(d for d in found if d not in blocked), False


def _ancestors(path: str) -> Iterator[str]:
    while path:
        yield path
        path = posixpath.dirname(path)


def make_dirs(resolved: Resolved) -> bool:
    """Create the directory and its missing parents; whether the directory itself was created."""
    info = lstat(resolved)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise FileAccessError(f"{resolved.virtual} exists and is not a directory.")
    with refusing(resolved):
        return resolved.real in fsaccess.make_dirs(resolved.root, resolved.real)


def replace_file(resolved: Resolved, data: bytes, previous: bytes | None) -> Callable[[], None]:
    """`atomic_write`, returning its undo: put `previous` back, or, when there was no file (`previous` is None),
    remove the new one and the directories this write created. The caller read `previous` (so bounded it)."""
    created = atomic_write(resolved, data)
    return lambda: put_back(resolved, previous, created)


def put_back(resolved: Resolved, previous: bytes | None, created: list[str]) -> None:
    """Undo a write: `previous` back in place, or, when there was no file, no file (and none of the directories
    in `created`, deepest first, the write made for it)."""
    if previous is not None:
        atomic_write(resolved, previous)
        return
    parent, name = posixpath.split(resolved.real)
    with refusing(resolved):
        with opened(open_beneath(resolved.root, parent, DIR_FLAGS)) as fd, suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)
        _remove_empty(resolved.root, created)


def remove_stale_temps(resolved: Resolved, *, young: Young = "spare") -> int:
    """Remove the temporary files that our writes, killed before their rename, left in `resolved`'s directory
    (every target's there, so one listing serves a directory); how many. A file is ours if its name's mac
    verifies, and stale if no writer holds its lock. An unlocked file under FRESH_SECONDS old may be a live write's
    between its create and its lock; `young` says what becomes of it: "spare" it; "wait" until it is that old and
    judge it again (at start-up, where a kill an instant ago is the likely case: at most FRESH_SECONDS, and only
    when there is such a file); "remove" it, for a caller holding what every writer of that directory holds until
    its rename (substrate healing, under the database's write lock: no live write is there)."""
    parent = posixpath.dirname(resolved.real)
    removed = 0
    with refusing(resolved):
        try:
            with opened(open_beneath(resolved.root, parent, LIST_FLAGS)) as fd:
                waits = {e: w for e in os.listdir(fd) if _ours(e) is not None and (w := _stale_in(fd, e)) is not None}
                if young == "wait" and (fresh := [w for w in waits.values() if w > 0]):
                    time.sleep(min(max(fresh), FRESH_SECONDS) + SLEEP_MARGIN)
                    waits = {e: w for e in waits if (w := _stale_in(fd, e)) is not None}
                for entry, wait in waits.items():
                    if wait == 0 or young == "remove":
                        with suppress(FileNotFoundError):
                            os.unlink(entry, dir_fd=fd)
                            removed += 1
        except FileNotFoundError:
            pass
    return removed


def _stale_in(dir_fd: int, entry: str) -> float | None:
    """How long until this unlocked temporary file is old enough to count as a dead write's (0: it is), or None
    while a live writer holds it (its lock goes with the process that dies)."""
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Between its exclusive create and its lock a write's file is unlocked for an instant: the fresh may be live.
        return max(0.0, FRESH_SECONDS - (time.time() - os.fstat(fd).st_mtime))
    except BlockingIOError:
        return None
    finally:
        os.close(fd)  # releases the lock just taken


def _remove_empty(root: str, directories: list[str]) -> None:
    for directory in directories:  # deepest first
        parent, name = posixpath.split(directory)
        try:
            with opened(open_beneath(root, parent, DIR_FLAGS)) as fd:
                os.rmdir(name, dir_fd=fd)
        except OSError:  # gone already, or no longer empty: something else lives there now
            break


def atomic_write(resolved: Resolved, data: bytes) -> list[str]:
    """Replace the file with `data` atomically, creating parent directories (the ones it created, deepest first,
    are returned); keeps an existing file's permissions."""
    parent, name = posixpath.split(resolved.real)
    if not name:
        raise FileAccessError(f"{resolved.virtual} is a directory; a file cannot be written there.")
    with refusing(resolved):
        created = fsaccess.make_dirs(resolved.root, parent)
        try:
            with opened(open_beneath(resolved.root, parent, DIR_FLAGS)) as fd:
                _write_in(fd, name, data, resolved.virtual)
        except BaseException:
            _remove_empty(resolved.root, created)
            with suppress(OSError, FileAccessError):
                remove_stale_temps(resolved)  # a failed write: what earlier killed ones left here goes too
            raise
    return created


def _write_in(dir_fd: int, name: str, data: bytes, virtual: str) -> None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        mode = 0o644
    else:
        if stat.S_ISDIR(info.st_mode):
            raise FileAccessError(f"{virtual} is a directory; a file cannot be written there.")
        mode = stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else 0o644
    temp = temp_name(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, mode & 0o777, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # ours alone to create, so never waits; held until the rename
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # still locked: no sweep takes it first
        # The rename itself survives a power cut, as the commit that follows it does.
        with opened(os.open(".", LIST_FLAGS, dir_fd=dir_fd)) as listing:
            os.fsync(listing)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
