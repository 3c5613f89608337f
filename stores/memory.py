"""Versioned memory documents: every write is an immutable version, and a write can be conditional.

A document is addressed by (scope, target): the scope is a session id for session targets and `agent:<id>` for
agent targets. Callers run writes inside a `BEGIN IMMEDIATE` transaction, so the precondition check and the write
are one atomic step across every process sharing the database: of N writers racing on one version, one wins.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel

from managed_tools.stores import search
from managed_tools.stores.db import Row, Tx
from managed_tools.stores.errors import NotFoundError, PreconditionError, StoreError
from managed_tools.stores.ids import sha256_hex, utc_now, uuid7
from managed_tools.stores.provenance import Provenance

Mode = Literal["replace", "append", "forget", "restore"]  # forget: an empty tombstone; restore: an older content again
PREVIEW_CHARS = 160
# A version that shares at least MIN_SHARED_CHARS leading characters with the one before it stores only the rest
# (an append, or an edit near the end); every MAX_DEPTH + 1-th version of a run of them is whole, so a read rebuilds
# from at most MAX_DEPTH + 1 rows (100 appends of 10k characters: 3 MB kept, not 50 MB; docs/retention.md).
MIN_SHARED_CHARS = 1024
MAX_DEPTH = 32


class Document(BaseModel):
    content: str
    content_hash: str | None
    version_id: str | None


class VersionRecord(BaseModel):
    id: str
    agent_id: str
    session_id: str | None
    target: str
    created_at: str
    source: str
    mode: str
    content_hash: str
    size_bytes: int
    wake_id: str | None
    preview: str
    provenance: Provenance = Provenance()


def agent_scope(agent_id: str) -> str:
    return f"agent:{agent_id}"


def preview(content: str) -> str:
    """Whitespace collapsed, at most 160 characters (157 + "...")."""
    flat = re.sub(r"\s+", " ", content).strip()
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 3] + "..."


def combine(existing: str, content: str, mode: Mode) -> str:
    """The reference's write rule: replace trims the end and adds a newline; append joins with one newline."""
    if mode == "forget":
        return ""
    if mode in ("replace", "restore"):
        return content.rstrip() + "\n"
    head = existing.rstrip()
    return (head + "\n" + content.strip() if head else content.strip()) + "\n"


async def read(tx: Tx, scope: str, target: str) -> Document:
    row = await tx.fetchone(
        "SELECT content, content_hash, version_id FROM memory_documents WHERE scope = ? AND target = ?",
        (scope, target),
    )
    if row is None:
        return Document(content="", content_hash=None, version_id=None)
    return Document(content=row["content"], content_hash=row["content_hash"], version_id=row["version_id"])


async def write(
    tx: Tx,
    *,
    scope: str,
    target: str,
    agent_id: str,
    session_id: str | None,
    wake_id: str | None,
    content: str,
    mode: Mode,
    source: str,
    provenance: Provenance,
    expected_version_id: str | None = None,
    expected_content_hash: str | None = None,
    searchable_title: str,
) -> tuple[VersionRecord, str | None, str]:
    """Write a new version with these sources (the caller's rule: tools/framework/context/provenance.py); returns
    (version, previous version id, new content).

    Raises PreconditionError, naming the latest version, when an expectation does not hold.
    """
    current = await read(tx, scope, target)
    latest = current.version_id or "none"
    if expected_version_id is not None and expected_version_id != current.version_id:
        raise PreconditionError(
            f"{source} version precondition failed for {target}: expected {expected_version_id} but latest is "
            f"{latest}. Read it again (memory_read) and retry with expectedVersionId={latest}."
        )
    if expected_content_hash is not None and expected_content_hash != current.content_hash:
        raise PreconditionError(
            f"{source} content precondition failed for {target}: expected hash {expected_content_hash} but the "
            f"current content hashes to {current.content_hash or 'nothing (empty)'} (latest version {latest})."
        )
    new_content = combine(current.content, content, mode)
    digest = sha256_hex(new_content)
    record = VersionRecord(
        id=uuid7(),
        agent_id=agent_id,
        session_id=session_id,
        target=target,
        created_at=utc_now(),
        source=source,
        mode=mode,
        content_hash=digest,
        size_bytes=len(new_content.encode()),
        wake_id=wake_id,
        preview=preview(new_content),
        provenance=provenance,
    )
    base = await _base(tx, current)
    stored, base_id, keep, depth = new_content, None, None, 0
    if base is not None and base.depth < MAX_DEPTH:
        shared = len(os.path.commonprefix([base.content, new_content]))  # noqa: RUF071 (characters, not paths)
        if shared >= MIN_SHARED_CHARS:  # a delta: what it shares with the version before it is not stored again
            stored, base_id, keep, depth = new_content[shared:], base.version_id, shared, base.depth + 1
    await tx.execute(
        "INSERT INTO memory_versions (id, scope, target, agent_id, session_id, wake_id, created_at, source, mode, "
        "content_hash, size_bytes, preview, content, provenance, seq, base_id, base_keep, depth) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            record.id,
            scope,
            target,
            agent_id,
            session_id,
            wake_id,
            record.created_at,
            source,
            mode,
            digest,
            record.size_bytes,
            record.preview,
            stored,
            provenance.to_json(),
            1 if base is None else base.seq + 1,
            base_id,
            keep,
            depth,
        ),
    )
    await tx.execute(
        "INSERT INTO memory_documents (scope, target, agent_id, session_id, content, content_hash, version_id, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(scope, target) DO UPDATE SET "
        "content = excluded.content, content_hash = excluded.content_hash, version_id = excluded.version_id, "
        "updated_at = excluded.updated_at",
        (scope, target, agent_id, session_id, new_content, digest, record.id, record.created_at),
    )
    await search.upsert(
        tx,
        key=f"memory:{scope}:{target}",
        source=target,
        agent_id=agent_id,
        session_id=session_id,
        title=searchable_title,
        body=new_content,
    )
    return record, current.version_id, new_content


def searchable_title(target: str, session_id: str | None) -> str:
    """What a document's search row is titled: a session's store names its session."""
    return target if session_id is None else f"{target} of session {session_id}"


class _Base(BaseModel):
    version_id: str
    seq: int
    depth: int
    content: str


async def _base(tx: Tx, current: Document) -> _Base | None:
    """The document's latest version, the next one's base: its seq (the next one's is one more) and its content."""
    if current.version_id is None:
        return None
    row = await tx.fetchone("SELECT seq, depth FROM memory_versions WHERE id = ?", (current.version_id,))
    if row is None:
        return None
    return _Base(version_id=current.version_id, seq=int(row["seq"]), depth=int(row["depth"]), content=current.content)


async def content_of(tx: Tx, version_id: str) -> str:
    """A version's whole text, rebuilt from the nearest whole version and the deltas after it (at most
    MAX_DEPTH of them), and checked against the hash it was written with."""
    chain: list[Row] = []
    next_id: str | None = version_id
    while next_id is not None:
        row = await tx.fetchone(
            "SELECT id, content, content_hash, base_id, base_keep FROM memory_versions WHERE id = ?", (next_id,)
        )
        if row is None:
            raise StoreError(f"memory version {next_id} (a base of {version_id}) is missing from the state")
        chain.append(row)
        next_id = row["base_id"]
    text = str(chain[-1]["content"])
    for row in reversed(chain[:-1]):
        text = text[: int(row["base_keep"])] + str(row["content"])
    if sha256_hex(text) != chain[0]["content_hash"]:
        raise StoreError(f"memory version {version_id} does not match its recorded hash; the state is damaged")
    return text


def _version(row: Row) -> VersionRecord:
    fields = {k: row[k] for k in VersionRecord.model_fields if k != "provenance"}
    return VersionRecord(**fields, provenance=Provenance.from_json(row["provenance"]))


async def search_key_provenance(tx: Tx, key: str) -> Provenance | None:
    """The sources of the document (`memory:<scope>:<target>`) or learning (`learning:<id>`) a search row came from;
    None for other rows."""
    if key.startswith("learning:"):
        found = await tx.scalar("SELECT provenance FROM learnings WHERE id = ?", (key.removeprefix("learning:"),))
        return None if found is None else Provenance.from_json(found)
    if not key.startswith("memory:"):
        return None
    scope, _, target = key.removeprefix("memory:").rpartition(":")
    return await provenance_of(tx, (await read(tx, scope, target)).version_id)


async def provenance_of(tx: Tx, version_id: str | None) -> Provenance:
    """A version's sources; none (trusted) for no version."""
    if version_id is None:
        return Provenance()
    return Provenance.from_json(await tx.scalar("SELECT provenance FROM memory_versions WHERE id = ?", (version_id,)))


async def list_versions(tx: Tx, scope: str, target: str, limit: int) -> list[VersionRecord]:
    rows = await tx.fetchall(
        "SELECT * FROM memory_versions WHERE scope = ? AND target = ? ORDER BY seq DESC LIMIT ?",
        (scope, target, limit),
    )
    return [_version(row) for row in rows]


async def read_version(tx: Tx, scope: str, target: str, version_id: str) -> tuple[VersionRecord, str]:
    row = await tx.fetchone(
        "SELECT * FROM memory_versions WHERE id = ? AND scope = ? AND target = ?", (version_id, scope, target)
    )
    if row is None:
        raise NotFoundError(f"No managed memory version exists for versionId={version_id} in {target}.")
    return _version(row), await content_of(tx, version_id)
