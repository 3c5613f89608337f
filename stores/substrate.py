"""Substrate versions and the staging manifest (reference §5), in SQLite.

Paths are virtual paths the path guard has already resolved (`/workspace/agent/SOUL.md`, `/workspace/SOUL.md`).
A promotion checks its preconditions, records its version and writes the file inside one `BEGIN IMMEDIATE`
transaction, which SQLite serialises across processes: of two promotions racing on one version, one wins.

The file is renamed into place before that transaction commits, so a process killed in between would leave a file
its history does not know. Each such write is therefore noted first (a pending-write note in the data dir, synced
before the rename, removed when the transaction ends), and start-up heals what a dead process left: a note whose
version never committed puts the old bytes back (`heal_interrupted`).
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from pydantic import BaseModel, ValidationError

from managed_tools.sandbox import files
from managed_tools.sandbox.mounts import Mount
from managed_tools.sandbox.paths import Resolved
from managed_tools.stores.db import Database, Row, Tx
from managed_tools.stores.errors import NotFoundError, PreconditionError, StoreError
from managed_tools.stores.ids import sha256_hex, utc_now, uuid7
from managed_tools.stores.memory import preview
from managed_tools.stores.provenance import Provenance

log = logging.getLogger("managed_tools.substrate")


class SubstrateVersion(BaseModel):
    id: str
    agent_id: str
    session_id: str | None
    wake_id: str | None
    source_path: str
    target_path: str
    created_at: str
    content_hash: str
    size_bytes: int
    preview: str
    restored_from_version_id: str | None
    provenance: Provenance = Provenance()


class StagedDraft(BaseModel):
    """A manifest entry: the draft at `session_path` was copied from `source_path` when both had these hashes."""

    session_path: str
    source_path: str
    source_content_hash: str
    target_content_hash: str
    staged_at: str


_COLUMNS = ", ".join(SubstrateVersion.model_fields)


def _version(row: Row) -> SubstrateVersion:
    fields = {k: row[k] for k in SubstrateVersion.model_fields if k != "provenance"}
    return SubstrateVersion(**fields, provenance=Provenance.from_json(row["provenance"]))


async def latest_version(tx: Tx, agent_id: str, target_path: str) -> SubstrateVersion | None:
    row = await tx.fetchone(
        f"SELECT {_COLUMNS} FROM substrate_versions WHERE agent_id = ? AND target_path = ? ORDER BY seq DESC LIMIT 1",
        (agent_id, target_path),
    )
    return None if row is None else _version(row)


async def latest_versions(tx: Tx, agent_id: str) -> dict[str, str]:
    """Each versioned target path of the agent and its latest version id."""
    rows = await tx.fetchall(
        "SELECT target_path, id FROM substrate_versions WHERE seq IN "
        "(SELECT MAX(seq) FROM substrate_versions WHERE agent_id = ? GROUP BY target_path)",
        (agent_id,),
    )
    return {row["target_path"]: row["id"] for row in rows}


async def list_versions(tx: Tx, agent_id: str, target_path: str, limit: int) -> list[SubstrateVersion]:
    rows = await tx.fetchall(
        f"SELECT {_COLUMNS} FROM substrate_versions WHERE agent_id = ? AND target_path = ? ORDER BY seq DESC LIMIT ?",
        (agent_id, target_path, limit),
    )
    return [_version(row) for row in rows]


async def read_version(tx: Tx, agent_id: str, version_id: str) -> tuple[SubstrateVersion, str]:
    row = await tx.fetchone(
        f"SELECT {_COLUMNS}, content FROM substrate_versions WHERE id = ? AND agent_id = ?", (version_id, agent_id)
    )
    if row is None:
        raise NotFoundError(f"No substrate version exists for versionId={version_id}.")
    return _version(row), row["content"]


async def check_expectations(
    tx: Tx,
    *,
    tool: str,
    agent_id: str,
    target_path: str,
    live_hash: str | None,
    expected_version_id: str | None,
    expected_content_hash: str | None,
) -> SubstrateVersion | None:
    """The optimistic preconditions of a promotion or restore; returns the latest version of the target.

    Raises PreconditionError naming what the caller should expect now.
    """
    latest = await latest_version(tx, agent_id, target_path)
    latest_id = None if latest is None else latest.id
    if expected_version_id is not None and expected_version_id != latest_id:
        raise PreconditionError(
            f"{tool} version precondition failed for {target_path}: expected {expected_version_id} but latest is "
            f"{latest_id or 'none'}. Compare again (resources_compare_with_substrate) and decide on the "
            "current content before retrying."
        )
    if expected_content_hash is not None and expected_content_hash != live_hash:
        now = live_hash or "nothing (the file does not exist)"
        raise PreconditionError(
            f"{tool} content precondition failed for {target_path}: expected hash {expected_content_hash} but the "
            f"live file hashes to {now}; it changed since you compared. Compare again "
            "(resources_compare_with_substrate) before retrying."
        )
    return latest


async def record_version(
    tx: Tx,
    *,
    agent_id: str,
    session_id: str | None,
    wake_id: str | None,
    source_path: str,
    target_path: str,
    content: str,
    provenance: Provenance,
    restored_from_version_id: str | None = None,
) -> SubstrateVersion:
    data = content.encode("utf-8")
    version = SubstrateVersion(
        id=uuid7(),
        agent_id=agent_id,
        session_id=session_id,
        wake_id=wake_id,
        source_path=source_path,
        target_path=target_path,
        created_at=utc_now(),
        content_hash=sha256_hex(data),
        size_bytes=len(data),
        preview=preview(content),
        restored_from_version_id=restored_from_version_id,
        provenance=provenance,
    )
    await insert_version(tx, version, content)
    return version


async def insert_version(tx: Tx, version: SubstrateVersion, content: str) -> None:
    """Append a version to its file's history as it is (a new one, or one a bundle carried in); the file on disk is
    the caller's to write, or not."""
    fields = {**version.model_dump(exclude={"provenance"}), "provenance": version.provenance.to_json()}
    await tx.execute(
        f"INSERT INTO substrate_versions ({_COLUMNS}, content) VALUES ({', '.join('?' * (len(fields) + 1))})",
        (*fields.values(), content),
    )


# ---- the staging manifest --------------------------------------------------------------------------------


def _draft(row: Row) -> StagedDraft:
    return StagedDraft(**{k: row[k] for k in StagedDraft.model_fields})


async def staged_draft(tx: Tx, session_id: str, session_path: str) -> StagedDraft | None:
    row = await tx.fetchone(
        "SELECT * FROM staged_drafts WHERE session_id = ? AND session_path = ?", (session_id, session_path)
    )
    return None if row is None else _draft(row)


async def save_draft(tx: Tx, session_id: str, draft: StagedDraft) -> None:
    await tx.execute(
        "INSERT INTO staged_drafts (session_id, session_path, source_path, source_content_hash, target_content_hash, "
        "staged_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(session_id, session_path) DO UPDATE SET "
        "source_path = excluded.source_path, source_content_hash = excluded.source_content_hash, "
        "target_content_hash = excluded.target_content_hash, staged_at = excluded.staged_at",
        (session_id, *draft.model_dump().values()),
    )


async def staged_drafts(tx: Tx, session_id: str, limit: int) -> tuple[int, list[StagedDraft]]:
    """(how many drafts the session has, the `limit` most recently staged)."""
    total = int(await tx.scalar("SELECT COUNT(*) FROM staged_drafts WHERE session_id = ?", (session_id,)))
    rows = await tx.fetchall(
        "SELECT * FROM staged_drafts WHERE session_id = ? ORDER BY staged_at DESC, session_path LIMIT ?",
        (session_id, limit),
    )
    return total, [_draft(row) for row in rows]


def staged_now(session_path: str, source_path: str, source_hash: str, target_hash: str) -> StagedDraft:
    return StagedDraft(
        session_path=session_path,
        source_path=source_path,
        source_content_hash=source_hash,
        target_content_hash=target_hash,
        staged_at=utc_now(),
    )


# ---- pending writes: the file renamed, the version not yet committed ------------------------------------------


def write_version(
    db: Database, tx: Tx, version: SubstrateVersion, target: Resolved, data: bytes, *, previous: bytes | None
) -> None:
    """Write a substrate file whose `version` `tx` is recording, tied to the transaction: noted first (so a start-up
    after a crash puts the old bytes back), undone if it rolls back. Synchronous on purpose (at most a mebibyte): in
    a worker thread the write could finish after a cancellation had already unwound the caller, with no undo
    registered."""
    forget = note_pending(db, version, target, previous)
    tx.on_rollback(forget)  # undo runs newest first: the file is put back, then the note goes
    tx.on_commit(forget)
    tx.on_rollback(files.replace_file(target, data, previous))


PENDING_DIR = "substrate-pending"


class PendingWrite(BaseModel):
    """A substrate file about to be replaced by a transaction that has not committed `version_id` yet."""

    version_id: str
    agent_id: str
    target_path: str
    root: str  # the substrate mount's real root and the path under it (private: the data dir is in no mount)
    real: str
    content_hash: str
    previous: str | None  # base64 of the bytes replaced; None when there was no file


def note_pending(
    db: Database, version: SubstrateVersion, target: Resolved, previous: bytes | None
) -> Callable[[], None]:
    """Write (and sync) the note before the file is renamed; returns what removes it once the transaction ends."""
    pending = PendingWrite(
        version_id=version.id,
        agent_id=version.agent_id,
        target_path=version.target_path,
        root=target.root,
        real=target.real,
        content_hash=version.content_hash,
        previous=None if previous is None else base64.b64encode(previous).decode("ascii"),
    )
    folder = db.local_dir / PENDING_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    note = folder / f"{version.id}.json"
    temp = folder / f".{version.id}.tmp"
    with open(temp, "wb") as handle:
        handle.write(pending.model_dump_json().encode())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, note)
    _sync_dir(folder)

    def forget() -> None:
        with suppress(FileNotFoundError):
            note.unlink()

    return forget


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def heal_interrupted(db: Database) -> list[str]:
    """At start-up: put back every substrate file that a dead process replaced without committing its version.

    Runs under the write lock, so no live process is between its rename and its commit (each holds that lock
    throughout). Returns the virtual paths put back."""
    folder = db.local_dir / PENDING_DIR
    if not folder.is_dir():
        return []
    healed: list[str] = []
    async with db.write() as tx:
        for entry in sorted(folder.iterdir()):
            if not entry.name.endswith(".json"):
                entry.unlink(missing_ok=True)  # a note cut short before its rename: its file was not touched yet
                continue
            try:
                pending = PendingWrite.model_validate_json(entry.read_bytes())
                if await _put_back(tx, pending):
                    healed.append(pending.target_path)
            except (ValidationError, StoreError, OSError) as exc:
                # Kept for the next start-up; the server still starts.
                log.warning("could not settle the pending substrate write %s: %s", entry.name, exc)
                continue
            entry.unlink()
    for path in healed:
        log.warning("put back %s: the process that replaced it died before recording its version", path)
    return healed


async def _put_back(tx: Tx, pending: PendingWrite) -> bool:
    """Undo the write if its version never committed and the file still holds what it wrote (unless that is
    also what the history's head says, as after a later promotion of the same bytes)."""
    if await tx.scalar("SELECT 1 FROM substrate_versions WHERE id = ?", (pending.version_id,)) is not None:
        return False
    mount = Mount(
        kind="agent_substrate",
        mount_path="/workspace/agent",
        root=Path(pending.root),
        access="read_only",
        scope="agent",
        prompt="",
    )
    target = Resolved(mount, pending.target_path, pending.real, pending.root, pending.real, exists=True)
    # Every substrate write (a promotion, a put-back) holds the write lock we hold until its rename, so an unlocked
    # temporary file here is a dead write's, however young: a start-up within FRESH_SECONDS of the kill must not
    # spare it, or nothing would ever remove it.
    files.remove_stale_temps(target, young="remove")
    if files.lstat(target) is None or files.sha256_file(target) != pending.content_hash:
        return False
    latest = await latest_version(tx, pending.agent_id, pending.target_path)
    if latest is not None and latest.content_hash == pending.content_hash:
        return False
    previous = None if pending.previous is None else base64.b64decode(pending.previous)
    files.put_back(target, previous, [])
    return True
