"""Files and images tool results attach (seed 001 §5): stored per session in the data dir, described in SQLite.

A file lives at `<data dir>/attachments/<session id>/<attachment id>`; its name on disk is its id (a UUID), never
the name a tool gave it, which is only recorded. The directories are made and the file created exclusively beneath
descriptors that follow no symbolic link (sandbox/fsaccess.py), mode 0600. Each attachment is bounded, and so are a
session's count and total size; the totals are read in the same write transaction that adds the row, so two
processes cannot both squeeze under a cap. A write transaction that rolls back removes the file it added.
"""

from __future__ import annotations

import os
import re
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
from pydantic import BaseModel

from managed_tools.sandbox import fsaccess
from managed_tools.sandbox.fsaccess import DIR_FLAGS, LIST_FLAGS, open_beneath, opened
from managed_tools.sandbox.paths import valid_id
from managed_tools.stores import images
from managed_tools.stores.db import Tx, as_dict
from managed_tools.stores.errors import NotFoundError, StoreError
from managed_tools.stores.ids import sha256_hex, utc_now, uuid7

DIRECTORY = "attachments"
MAX_NAME_CHARS = 255
_MIME = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")


class AttachmentError(StoreError):
    """An attachment refused: too large, one too many, a bad name or type, or an image whose header lies."""


@dataclass(frozen=True)
class AttachmentLimits:
    max_bytes: int = 10 << 20  # one attachment
    max_session_bytes: int = 100 << 20  # all of a session's attachments together
    max_count: int = 100  # attachments per session


class AttachmentRecord(BaseModel):
    id: str
    session_id: str
    name: str
    mime_type: str
    size: int
    width: int | None
    height: int | None
    sha256: str
    created_at: str


def directory(data_dir: Path) -> Path:
    """Where every session's attachments live (the path guard is given the same)."""
    return data_dir / DIRECTORY


def _check(data: bytes, name: str, mime_type: str, limits: AttachmentLimits) -> tuple[int, int] | None:
    """The image's (width, height), after refusing what must not be stored."""
    if not name or len(name) > MAX_NAME_CHARS or any(c in name for c in "/\\") or not name.isprintable():
        raise AttachmentError(
            f"An attachment's name is 1-{MAX_NAME_CHARS} printable characters without / or \\ (a file name, not a "
            "path)."
        )
    if not _MIME.match(mime_type):
        raise AttachmentError(f"{mime_type[:80]!r} is not a MIME type (type/subtype, lower case).")
    if len(data) > limits.max_bytes:
        raise AttachmentError(f"{name} is {len(data)} bytes; one attachment may be at most {limits.max_bytes} bytes.")
    if mime_type not in images.IMAGE_TYPES:
        return None
    size = images.dimensions(data) if images.sniff(data) == mime_type else None
    if size is None:
        raise AttachmentError(f"{name} is declared {mime_type} but its bytes are not a readable {mime_type} image.")
    return size


async def save(
    tx: Tx, data_dir: Path, session_id: str, data: bytes, *, name: str, mime_type: str, limits: AttachmentLimits
) -> AttachmentRecord:
    """Store one attachment of `session_id` (in a write transaction): the file, then its row."""
    if not valid_id(session_id):
        raise AttachmentError("Attachments belong to a session; this one has no valid id.")
    size = _check(data, name, mime_type, limits)
    row = await tx.fetchone(
        "SELECT (SELECT 1 FROM sessions WHERE id = ?) AS known, count(*) AS n, coalesce(sum(size), 0) AS total "
        "FROM attachments WHERE session_id = ?",
        (session_id, session_id),
    )
    if row is None or row["known"] is None:
        raise AttachmentError(f"There is no session {session_id} to attach to.")
    count, total = int(row["n"]), int(row["total"])  # PostgreSQL sums a bigint as numeric
    if count >= limits.max_count:
        raise AttachmentError(f"This session already has {count} attachments, the most it may keep.")
    if total + len(data) > limits.max_session_bytes:
        raise AttachmentError(
            f"{name} ({len(data)} bytes) would take this session's attachments past {limits.max_session_bytes} "
            f"bytes ({total} used)."
        )
    record = AttachmentRecord(
        id=uuid7(), session_id=session_id, name=name, mime_type=mime_type, size=len(data),
        width=size[0] if size else None, height=size[1] if size else None, sha256=sha256_hex(data),
        created_at=utc_now(),
    )  # fmt: skip
    root = await anyio.to_thread.run_sync(_write, data_dir, record, data)
    tx.on_rollback(lambda: _remove(root, record))
    await tx.execute(
        "INSERT INTO attachments (id, session_id, name, mime_type, size, width, height, sha256, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (record.id, session_id, name, mime_type, record.size, record.width, record.height, record.sha256,
         record.created_at),
    )  # fmt: skip
    return record


def _write(data_dir: Path, record: AttachmentRecord, data: bytes) -> str:
    """Create the file exclusively under its session directory's descriptor, no link followed on the way; the
    data dir's real path, where it went."""
    root, folder = os.path.realpath(data_dir), f"{DIRECTORY}/{record.session_id}"
    try:
        fsaccess.make_dirs(root, folder)
        with opened(open_beneath(root, folder, DIR_FLAGS)) as parent:
            fd = os.open(record.id, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=parent)  # fmt: skip
            try:
                with os.fdopen(fd, "wb", closefd=False) as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        raise fsaccess.refusal(f"attachment {record.name}", exc) from None
    return root


def _remove(root: str, record: AttachmentRecord) -> None:
    folder = f"{DIRECTORY}/{record.session_id}"
    with opened(open_beneath(root, folder, DIR_FLAGS)) as parent, suppress(FileNotFoundError):
        os.unlink(record.id, dir_fd=parent)


_COLUMNS = "a.id, a.session_id, a.name, a.mime_type, a.size, a.width, a.height, a.sha256, a.created_at"


async def get(tx: Tx, agent_id: str, session_id: str, attachment_id: str, *, owner: str) -> AttachmentRecord:
    """An attachment of `session_id`, if that session is `agent_id`'s and `owner`'s (its principal). Another
    agent's or principal's, another session's id, or one that never existed read alike: not found, so ids cannot be
    probed."""
    row = await tx.fetchone(
        f"SELECT {_COLUMNS} FROM attachments a JOIN sessions s ON s.id = a.session_id "
        "WHERE a.id = ? AND a.session_id = ? AND s.agent_id = ? AND s.owner = ?",
        (attachment_id, session_id, agent_id, owner),
    )
    if row is None:
        raise NotFoundError("No such attachment.")
    return AttachmentRecord(**as_dict(row))


async def of_session(tx: Tx, session_id: str) -> list[AttachmentRecord]:
    """The session's attachments, oldest first (at most the count cap of them)."""
    rows = await tx.fetchall(
        f"SELECT {_COLUMNS} FROM attachments a WHERE a.session_id = ? ORDER BY a.id LIMIT 1000", (session_id,)
    )
    return [AttachmentRecord(**as_dict(row)) for row in rows]


async def remove_orphans(tx: Tx, data_dir: Path) -> int:
    """Remove the attachment files that a process killed between writing one and committing its row left behind;
    how many. Run inside a write transaction: every attachment is written under that lock before its row is
    inserted, so while it is held no other process is between the two."""
    if not tx.writing:
        raise RuntimeError("remove_orphans needs the write transaction (Database.write).")
    on_disk = await anyio.to_thread.run_sync(_stored_files, data_dir)
    orphans: list[tuple[str, str]] = []
    for session_id, ids in on_disk.items():
        rows = await tx.fetchall("SELECT id FROM attachments WHERE session_id = ?", (session_id,))
        orphans += [(session_id, orphan) for orphan in ids - {str(row["id"]) for row in rows}]
    if orphans:
        await anyio.to_thread.run_sync(_unlink, data_dir, orphans)
    return len(orphans)


def _stored_files(data_dir: Path) -> dict[str, set[str]]:
    root = os.path.realpath(data_dir)
    found: dict[str, set[str]] = {}
    try:
        with opened(open_beneath(root, DIRECTORY, LIST_FLAGS)) as top:
            sessions = [entry for entry in os.listdir(top) if valid_id(entry)]
    except FileNotFoundError:
        return found
    for session_id in sessions:
        with opened(open_beneath(root, f"{DIRECTORY}/{session_id}", LIST_FLAGS)) as folder:
            if ids := {entry for entry in os.listdir(folder) if valid_id(entry)}:
                found[session_id] = ids
    return found


def _unlink(data_dir: Path, files: list[tuple[str, str]]) -> None:
    root = os.path.realpath(data_dir)
    for session_id, attachment_id in files:
        folder = open_beneath(root, f"{DIRECTORY}/{session_id}", DIR_FLAGS)
        with opened(folder), suppress(FileNotFoundError):
            os.unlink(attachment_id, dir_fd=folder)
