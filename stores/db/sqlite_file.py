"""The state file itself: opening it (the checks before, the connections, WAL mode, the migrations) and the clear
errors for what its disk or file system refuses. The engine that runs transactions on it is stores/db/sqlite.py."""

from __future__ import annotations

import errno
import os
import secrets
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ValidationError

from managed_tools.stores.db import LOCKED, Synchronous
from managed_tools.stores.db.migrations import MIGRATIONS, statements
from managed_tools.stores.errors import (
    DatabaseBusyError,
    DatabaseDamagedError,
    DatabaseOpenError,
    DatabaseReadOnlyError,
    DatabaseUnwritableError,
    DiskFullError,
)

WAL_SIZE_LIMIT = 2 * 1024 * 1024
FULL = (
    "The disk that holds the server's state is full, so nothing was written. Every call is recorded before it "
    "runs, so no call can run until space is freed there: ask the person running the server (`managed-tools where` "
    "shows the data dir)."
)
DAMAGED = (
    "The server's state files were changed underneath it (its write-ahead log or shared-memory file deleted or "
    "replaced) or SQLite found them damaged, so nothing was written. The server reopens them on its own: try again "
    "in a moment; if this repeats, ask the person running the server (the log says which file)."
)
READ_ONLY = (
    "The file system that holds the server's state turned read-only while the server ran, so nothing was written, "
    "and no call can run (each is recorded before it runs). Ask the person running the server to make it writable "
    "and restart the server (`managed-tools where` shows the data dir)."
)


def _refusal(exc: BaseException, path: Path, locked: str = LOCKED) -> DatabaseUnwritableError | None:
    """The clear error for a write that the disk or the file of the state at `path` refused, if `exc` is one."""
    code = getattr(exc, "sqlite_errorname", "")
    number = exc.errno if isinstance(exc, OSError) else None
    if code == "SQLITE_FULL" or number == errno.ENOSPC:
        return DiskFullError(FULL)
    if (
        code.startswith("SQLITE_READONLY")
        or number == errno.EROFS
        or (code.startswith("SQLITE_IOERR") and _read_only(path))
    ):
        return DatabaseReadOnlyError(READ_ONLY)
    text = str(exc).lower() if isinstance(exc, sqlite3.OperationalError) else ""
    if "locked" in text or "busy" in text:
        return DatabaseBusyError(locked)
    if code.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR")):
        return DatabaseDamagedError(DAMAGED)
    return None


def _read_only(path: Path) -> bool:
    """Has the file system of `path` turned read-only? SQLite reports a write that the kernel refused with EROFS
    only as an I/O error, and a file system that turned read-only on an error (ext4's errors=remount-ro) may not
    say so in its mount flags: so try what SQLite tried, creating an unnamed file beside it (on this error path
    only)."""
    try:
        with tempfile.TemporaryFile(dir=path.parent):
            return False
    except OSError as exc:
        return exc.errno == errno.EROFS


@contextmanager
def refused_clearly(path: Path, locked: str = LOCKED) -> Iterator[None]:
    """SQLite's "database is locked" after the busy timeout, a full disk and a read-only file system become
    errors a person can act on."""
    try:
        yield
    except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as exc:
        clear = _refusal(exc, path, locked)
        if clear is None:
            raise
        raise clear from exc


def identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def companion(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


class StateFiles(BaseModel):
    """Which files the state is: `state.db` and the write-ahead log and shared-memory index SQLite keeps beside it,
    each as (device, inode), None when absent. The three are one unit: a log paired with another database file is
    garbage to SQLite ("database disk image is malformed"), and a write into a deleted log is lost at a kill."""

    db: tuple[int, int] | None
    wal: tuple[int, int] | None
    shm: tuple[int, int] | None

    @classmethod
    def of(cls, path: Path) -> StateFiles:
        return cls(db=identity(path), wal=identity(companion(path, "-wal")), shm=identity(companion(path, "-shm")))

    def changed(self, now: StateFiles) -> list[str]:
        """The suffixes ("", "-wal", "-shm") of the files that are not the ones this describes."""
        return [suffix for suffix, field in FIELDS if getattr(self, field) != getattr(now, field)]


FIELDS = (("", "db"), ("-wal", "wal"), ("-shm", "shm"))
NOTE = "-files"  # state.db-files: the identities of the three when a server last opened them (StateFiles, JSON)


def remember(path: Path, files: StateFiles) -> None:
    """Note which log and index belong to which `state.db` (beside them; rewritten only when it changes), so a
    start after `state.db` was replaced can tell its companions are another file's (`set_aside_stale`)."""
    note = companion(path, NOTE)
    text = files.model_dump_json()
    try:
        if note.read_text() == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    temp = companion(path, f"{NOTE}.{os.getpid()}.tmp")
    temp.write_text(text)
    os.replace(temp, note)


def set_aside_stale(path: Path) -> list[Path]:
    """Before the first connection: move aside (never delete) a write-ahead log and index that belong to a
    `state.db` since replaced (a backup renamed over it while a server ran); SQLite would replay that log into
    the new file. Returns where they went."""
    try:
        noted = StateFiles.model_validate_json(companion(path, NOTE).read_bytes())
    except (OSError, ValidationError):
        return []  # never noted (a first start, or an older version's data dir): nothing to compare with
    now = StateFiles.of(path)
    if now.db is None or noted.db == now.db:
        return []
    # Only the very files noted with the old database: a log made since (by a server that opened the new file) is
    # the new file's own.
    return [
        move_aside(companion(path, suffix))
        for suffix, field in FIELDS[1:]
        if getattr(now, field) is not None and getattr(now, field) == getattr(noted, field)
    ]


def move_aside(path: Path) -> Path:
    """`path` renamed beside itself with a `.stale-<time>` suffix (a file of the state is never deleted)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.stale-{stamp}-{secrets.token_hex(3)}")
    os.rename(path, aside)
    return aside


def refuse_unusable_file(path: Path) -> None:
    """A directory where the file should be, or a file SQLite would open read-only without a word (the first
    write would fail much later)."""
    if path.exists() and not path.is_file():
        raise DatabaseOpenError(f"The state database {path} is not a file: move it aside, or choose another data dir.")
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if file.exists() and not os.access(file, os.W_OK):
            raise DatabaseOpenError(
                f"The state database file {file} is read-only: the server writes to it; make it writable, "
                "or choose another data dir."
            )


def connect(path: Path, busy_timeout_ms: int, synchronous: Synchronous) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        # No checkpoint on a commit: a checkpoint syncs the disk, and the appender commits on the loop's thread;
        # the database thread checkpoints each WAL_CHECKPOINT_PAGES instead (SQLite's default is about 4 MB, a
        # mount's worth on a small disk). The WAL is cut back to WAL_SIZE_LIMIT when it starts over, or it would
        # keep its largest size for good.
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    except BaseException:
        conn.close()
        raise
    return conn


def unusable(path: Path, exc: sqlite3.Error | OSError) -> str:
    """Why the state file cannot be used and what to do, in one sentence for the person who started the server
    (never shown to a model: it names host paths)."""
    if isinstance(exc, FileExistsError):
        return f"The data dir {path.parent} is a file, not a directory; choose another data dir."
    code = getattr(exc, "sqlite_errorname", "")
    if code == "SQLITE_FULL" or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        return (
            f"The disk holding the state database {path} is full: free space on it (`df {path.parent}`), or "
            "choose another data dir."
        )
    if isinstance(exc, OSError):
        return f"Cannot create the data dir {path.parent}: {exc.strerror or exc}; choose another data dir."
    if code.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")):
        return (
            f"The state database {path} is not a usable SQLite database ({exc}: corrupt, cut short, or another "
            "kind of file): move it aside to start afresh, or choose another data dir."
        )
    if code.startswith(("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH")):
        return (
            f"The state database {path} is read-only ({exc}): the server writes to it and to its directory; "
            "make both writable, or choose another data dir."
        )
    if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return f"The state database {path} stayed locked by another process; try again in a moment."
    if code.startswith("SQLITE_CANTOPEN"):
        return (
            f"Cannot open or create the state database {path} ({exc}): its directory must be a writable "
            "directory; choose another data dir."
        )
    return f"Cannot use the state database {path} ({exc}): check it and its directory, or choose another data dir."


def prepare(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """Switch to WAL and migrate, retrying while other processes do the same (on the database thread).

    On a fresh file two processes can meet where SQLite answers "locked" at once instead of waiting (switching
    the journal mode, or two readers both upgrading to writers), so the busy timeout alone is not enough here.
    """
    deadline = time.monotonic() + max(busy_timeout_ms / 1000, 1.0) * 3
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            _migrate(conn)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.02 + secrets.randbelow(80) / 1000)


def _migrate(conn: sqlite3.Connection) -> None:
    """Apply the numbered migrations not yet recorded, each in its own IMMEDIATE transaction.

    The version is read inside the transaction, so two processes starting at once never apply one twice.
    """
    for migration in MIGRATIONS:
        version, name = migration[0], migration[1]
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))"
            )
            done = conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,)).fetchone()
            if done is None:
                for statement in statements(migration, "sqlite"):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (version, name))
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
