"""The memory bundle (`managed-tools memory export` / `import`): an agent's memory as JSON lines, carried exactly.

One record per line, each naming its `kind`: a header with the format version first, then the sessions the
records name, every version of every memory store and each store's head, every learning, every substrate version
(its full text, in history order), and an end record counting them (a bundle cut short is refused). What the state
derives from these is not carried but rebuilt on import: a store's current document, the full-text index (and any
index built beside it). Nothing else is carried: no events, approvals, outcomes, plans, vault secrets,
configuration or files on disk (docs/decisions/memory-bundle.md).

A bundle is a function of the state alone (no export time in it, every kind in a fixed order), so exporting what an
import made gives the same bytes. An import checks every line against the models here (an allow-list: an unknown
kind or field is refused, a content hash must match its content), bounded in line and file size, then writes
everything in one transaction: a failure leaves nothing. It merges only where that loses nothing: a record already
here identically is skipped, and a store or file whose history here holds versions the bundle lacks is refused.
"""

from __future__ import annotations

import json
import posixpath
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from managed_tools.stores import learnings, memory, search, substrate
from managed_tools.stores.db import Row, Tx
from managed_tools.stores.errors import StoreError
from managed_tools.stores.ids import sha256_hex
from managed_tools.stores.provenance import Provenance, Source

FORMAT = 2  # 2: a learning's state and what it supersedes, the notes' forget and restore versions; 1 still read
MAX_LINE_BYTES = 16 * 1024 * 1024  # a memory document's million characters, escaped, fits
MAX_BUNDLE_BYTES = 512 * 1024 * 1024  # the records are checked whole before anything is written
PAGE = 500

Id = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
Stamp = Annotated[str, StringConstraints(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")]
Agent = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Name = Annotated[str, StringConstraints(max_length=1000)]
SESSION_STORES = ("session_state", "working_buffer")
Store = Literal["session_state", "working_buffer", "workspace_memory_notes"]  # the versioned ones


class BundleError(StoreError):
    """A bundle this managed-tools will not import, or a state it will not export; one line for a person."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """PostgreSQL's text refuses NUL: said here, with the line, not by the database mid-import."""
        if isinstance(value, str) and "\x00" in value:
            raise ValueError("holds a NUL character")
        return value


class Header(_Record):
    kind: Literal["header"]
    format: Annotated[int, Field(ge=1)]
    producer: Name


class Session(_Record):
    """A session a record names: only who it belongs to and when it began (its events are not carried)."""

    kind: Literal["session"]
    id: Id
    agent_id: Agent
    owner: Name
    title: str | None
    created_at: Stamp


class MemoryVersion(_Record):
    kind: Literal["memory_version"]
    id: Id
    scope: Name
    target: Store
    agent_id: Agent
    session_id: Id | None
    wake_id: Id | None
    created_at: Stamp
    source: Name
    mode: memory.Mode
    content_hash: Digest
    content: str
    provenance: tuple[Source, ...]

    @model_validator(mode="after")
    def _consistent(self) -> MemoryVersion:
        owner = self.session_id if self.target in SESSION_STORES else None
        scope = owner or memory.agent_scope(self.agent_id)
        if (self.target in SESSION_STORES) != (self.session_id is not None) or self.scope != scope:
            raise ValueError(f"{self.target} belongs in scope {scope!r} (a session's store names its session)")
        if sha256_hex(self.content) != self.content_hash:
            raise ValueError("content_hash is not the SHA-256 of content")
        return self


class MemoryHead(_Record):
    """Which version is a store's current content."""

    kind: Literal["memory_head"]
    scope: Name
    target: Store
    version_id: Id


class Learning(_Record):
    kind: Literal["learning"]
    id: Id
    agent_id: Agent
    session_id: Id | None
    type: learnings.Kind
    title: str
    detail: str
    promoted: bool
    created_at: Stamp
    provenance: tuple[Source, ...]
    state: learnings.State = "active"  # format 1 had no corrections
    supersedes: Id | None = None


def _virtual(path: str) -> str:
    """A substrate file's virtual path: under /workspace, normalised, no control characters. Nothing writes it to
    disk on import, but a later restore would, so it is checked as the path guard would see it."""
    if (
        not path.startswith("/workspace/")
        or posixpath.normpath(path) != path
        or any(ord(c) < 32 or c == "\x7f" for c in path)
    ):
        raise ValueError(f"{path!r} is not a normalised path under /workspace")
    return path


class SubstrateVersion(_Record):
    kind: Literal["substrate_version"]
    id: Id
    agent_id: Agent
    session_id: Id | None
    wake_id: Id | None
    source_path: Name
    target_path: Annotated[Name, StringConstraints(max_length=4096)]
    created_at: Stamp
    content_hash: Digest
    restored_from_version_id: Id | None
    content: str
    provenance: tuple[Source, ...]

    @model_validator(mode="after")
    def _consistent(self) -> SubstrateVersion:
        _virtual(self.target_path)
        if sha256_hex(self.content) != self.content_hash:
            raise ValueError("content_hash is not the SHA-256 of content")
        return self


class End(_Record):
    kind: Literal["end"]
    records: Annotated[int, Field(ge=0)]


Record = Header | Session | MemoryVersion | MemoryHead | Learning | SubstrateVersion | End
_RECORD: TypeAdapter[Record] = TypeAdapter(Annotated[Record, Field(discriminator="kind")])


def line_of(record: Record) -> bytes:
    """A record as its bundle line: fields in the models' order, UTF-8 as it is, so equal states give equal bytes."""
    return record.model_dump_json().encode("utf-8") + b"\n"


# ---- export ----------------------------------------------------------------------------------------------------


async def _pages(tx: Tx, table: str, order: Sequence[str], where: str = "") -> AsyncIterator[Row]:
    """Every row of `table` (`where` it holds) in `order`, a page at a time (keyset: no OFFSET)."""
    columns = ", ".join(order)
    after: tuple[Any, ...] | None = None
    while True:
        conditions = [where] if where else []
        if after is not None:
            conditions.append(f"({columns}) > ({', '.join('?' * len(order))})")
        clause = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        sql = f"SELECT * FROM {table}{clause} ORDER BY {columns} LIMIT ?"
        rows = await tx.fetchall(sql, (*(after or ()), PAGE))
        for row in rows:
            yield row
        if len(rows) < PAGE:
            return
        after = tuple(rows[-1][name] for name in order)


def _sources(raw: str) -> tuple[Source, ...]:
    return Provenance.from_json(raw).sources


async def export(tx: Tx, producer: str) -> AsyncIterator[Record]:
    """Every record of the state, in bundle order (one read snapshot: `tx`)."""
    yield Header(kind="header", format=FORMAT, producer=producer)
    count = 0
    named = (
        "id IN (SELECT session_id FROM memory_versions UNION SELECT session_id FROM learnings UNION "
        "SELECT session_id FROM substrate_versions)"
    )
    try:
        async for row in _pages(tx, "sessions", ("id",), named):
            yield Session(kind="session", **{k: row[k] for k in ("id", "agent_id", "owner", "title", "created_at")})
            count += 1
        # In commit order (seq), each version's whole text (a stored delta rebuilt: memory.content_of).
        async for row in _pages(tx, "memory_versions", ("scope", "target", "seq")):
            fields = {k: row[k] for k in MemoryVersion.model_fields if k not in ("kind", "provenance", "content")}
            content = row["content"] if row["base_id"] is None else await memory.content_of(tx, row["id"])
            yield MemoryVersion(
                kind="memory_version", **fields, content=content, provenance=_sources(row["provenance"])
            )
            count += 1
        async for row in _pages(tx, "memory_documents", ("scope", "target")):
            yield MemoryHead(kind="memory_head", scope=row["scope"], target=row["target"], version_id=row["version_id"])
            count += 1
        async for row in _pages(tx, "learnings", ("created_at", "id")):
            item = learnings.from_row(row)
            yield Learning(
                kind="learning",
                **item.model_dump(
                    include={"id", "agent_id", "session_id", "title", "detail", "created_at", "state", "supersedes"}
                ),
                type=item.kind,
                promoted=item.promote_to_memory,
                provenance=item.provenance.sources,
            )
            count += 1
        async for row in _pages(tx, "substrate_versions", ("seq",)):
            fields = {k: row[k] for k in SubstrateVersion.model_fields if k not in ("kind", "provenance")}
            yield SubstrateVersion(kind="substrate_version", **fields, provenance=_sources(row["provenance"]))
            count += 1
    except ValidationError as exc:  # a row no bundle can carry: never a bundle its import would refuse
        raise BundleError(f"the state holds a record this bundle format cannot carry: {_said(exc)}") from exc
    yield End(kind="end", records=count)


# ---- reading ---------------------------------------------------------------------------------------------------


def bounded_lines(handle: IO[bytes], what: str, *, max_line: int, max_total: int) -> Iterator[tuple[int, bytes]]:
    """Each line of `handle` and its number (from 1), never reading more than `max_line` bytes of one line or
    `max_total` of all: a huge line or file is one clear error, not memory exhausted."""
    total = 0
    for number in range(1, 2**62):
        line = handle.readline(max_line + 1)
        if not line:
            return
        total += len(line)
        if len(line) > max_line:
            raise BundleError(f"{what} line {number} is longer than {max_line:,} bytes: refused.")
        if total > max_total:
            raise BundleError(f"{what} is larger than {max_total:,} bytes: refused (line {number}).")
        yield number, line


def _said(exc: ValidationError) -> str:
    """A validation error as one line: where in the record, and what is wrong (never the value itself)."""
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"] if not str(part).startswith(("function-", "json-or-python")))
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"


def _header(number: int, line: bytes) -> Header:
    """The first line: a newer format is refused before its records are read with rules it does not follow."""
    try:
        raw = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"line {number}: not JSON ({exc.msg if hasattr(exc, 'msg') else exc}).") from exc
    if not isinstance(raw, dict) or raw.get("kind") != "header":
        raise BundleError(f'line {number}: a bundle starts with its header record (kind "header"); not a bundle?')
    if isinstance(raw.get("format"), int) and raw["format"] > FORMAT:
        raise BundleError(
            f"this bundle is format {raw['format']}, newer than this managed-tools reads (format {FORMAT} and older): "
            "upgrade managed-tools to import it."
        )
    try:
        return Header.model_validate(raw)
    except ValidationError as exc:
        raise BundleError(f"line {number}: header: {_said(exc)}") from exc


@dataclass
class Bundle:
    """A bundle's records checked one by one and as a whole, each with its line number."""

    header: Header
    records: list[tuple[int, Record]] = field(default_factory=list)


def read(handle: IO[bytes], what: str, *, max_line: int = MAX_LINE_BYTES, max_total: int = MAX_BUNDLE_BYTES) -> Bundle:
    """Every record of a bundle, checked (raises BundleError naming the first line that fails)."""
    lines = bounded_lines(handle, what, max_line=max_line, max_total=max_total)
    first = next(lines, None)
    if first is None:
        raise BundleError(f"{what} is empty: not a bundle.")
    bundle = Bundle(_header(*first))
    end: End | None = None
    for number, line in lines:
        if end is not None:
            raise BundleError(f"line {number}: nothing may follow the end record.")
        if not line.strip():
            raise BundleError(f"line {number}: an empty line; a bundle has one record on every line.")
        try:
            record = _RECORD.validate_json(line)
        except ValidationError as exc:
            raise BundleError(f"line {number}: {_said(exc)}") from exc
        if isinstance(record, Header):
            raise BundleError(f"line {number}: a second header; a bundle has one, on its first line.")
        if isinstance(record, End):
            end = record
            if record.records != len(bundle.records):
                raise BundleError(
                    f"line {number}: the end record counts {record.records} records but the bundle holds "
                    f"{len(bundle.records)}."
                )
            continue
        bundle.records.append((number, record))
    if end is None:
        raise BundleError(f"{what} has no end record: it was cut short (or is not a bundle); nothing was imported.")
    _check_whole(bundle)
    return bundle


def _check_whole(bundle: Bundle) -> None:
    """What no single line shows: ids once each, every head naming one of its store's versions, one head a store."""
    seen: dict[tuple[str, str], int] = {}
    versions: dict[str, tuple[str, str]] = {}
    stores: dict[tuple[str, str], int] = {}
    heads: dict[tuple[str, str], int] = {}
    for number, record in bundle.records:
        if isinstance(record, MemoryHead):
            key: tuple[str, str] = (record.scope, record.target)
            if key in heads:
                raise BundleError(f"line {number}: a second head for {record.target} in {record.scope}.")
            if versions.get(record.version_id) != key:
                raise BundleError(f"line {number}: the head names version {record.version_id}, no earlier version "
                                  f"of {record.target} in {record.scope}.")  # fmt: skip
            heads[key] = number
            continue
        assert not isinstance(record, (Header, End))
        if (earlier := seen.get((record.kind, record.id))) is not None:
            raise BundleError(f"line {number}: {record.kind} {record.id} again (first on line {earlier}).")
        seen[record.kind, record.id] = number
        if isinstance(record, MemoryVersion):
            versions[record.id] = (record.scope, record.target)
            stores.setdefault((record.scope, record.target), number)
    for (scope, target), number in stores.items():
        if (scope, target) not in heads:
            raise BundleError(f"line {number}: {target} in {scope} has versions but no head record.")


# ---- import ----------------------------------------------------------------------------------------------------


@dataclass
class Counts:
    """What an import wrote (or would), and what it found here already."""

    sessions: int = 0
    memory_versions: int = 0
    stores: int = 0
    learnings: int = 0
    substrate_versions: int = 0
    already: int = 0

    def said(self) -> str:
        parts = [
            f"{self.sessions} sessions",
            f"{self.memory_versions} memory versions of {self.stores} stores",
            f"{self.learnings} learnings",
            f"{self.substrate_versions} substrate versions",
        ]
        return ", ".join(parts) + (f" ({self.already} records already here, skipped)" if self.already else "")


Progress = Callable[[int, int], None]  # (records done, records in all)


async def _existing(tx: Tx, table: str, columns: str, ids: list[str]) -> dict[str, Row]:
    found: dict[str, Row] = {}
    for start in range(0, len(ids), PAGE):
        chunk = ids[start : start + PAGE]
        sql = f"SELECT id, {columns} FROM {table} WHERE id IN ({', '.join('?' * len(chunk))})"
        found.update({row["id"]: row for row in await tx.fetchall(sql, chunk)})
    return found


async def _absent(
    tx: Tx,
    table: str,
    compared: tuple[str, ...],
    records: list[tuple[int, Any]],
    *,
    counts: Counts,
    step: Callable[[], None],
) -> list[tuple[int, Any]]:
    """The records whose id is not here yet; one here already with the same `compared` values is counted and
    skipped, one with other values is refused (the same id must mean the same record)."""
    here = await _existing(tx, table, ", ".join(compared), [r.id for _, r in records])
    absent = []
    for number, record in records:
        step()
        if (row := here.get(record.id)) is None:
            absent.append((number, record))
        elif tuple(row[name] for name in compared) == tuple(getattr(record, name) for name in compared):
            counts.already += 1
        else:
            said = record.kind.replace("_", " ")
            raise BundleError(f"line {number}: {said} {record.id} exists here as another ({', '.join(compared)}).")
    return absent


async def apply(tx: Tx, bundle: Bundle, progress: Progress) -> Counts:
    """Write a checked bundle in `tx` (the caller's one transaction); raises BundleError, naming the line, where it
    would lose or contradict what is here."""
    counts = Counts()
    by_kind: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    for number, record in bundle.records:
        by_kind[record.kind].append((number, record))
    total, done = len(bundle.records), 0

    def step() -> None:
        nonlocal done
        done += 1
        progress(done, total)

    await _sessions(tx, by_kind["session"], counts, step)
    await _memory(tx, by_kind["memory_version"], by_kind["memory_head"], counts, step)
    await _learnings(tx, by_kind["learning"], counts, step)
    await _substrate(tx, by_kind["substrate_version"], counts, step)
    return counts


async def _sessions(tx: Tx, records: list[tuple[int, Session]], counts: Counts, step: Callable[[], None]) -> None:
    for _, record in await _absent(tx, "sessions", ("agent_id", "owner"), records, counts=counts, step=step):
        # Idle, as a session no client has attached to yet: `serve --session ID` resumes it with its memory.
        await tx.execute(
            "INSERT INTO sessions (id, agent_id, owner, title, status, created_at, updated_at, last_activity_at) "
            "VALUES (?, ?, ?, ?, 'idle', ?, ?, ?)",
            (record.id, record.agent_id, record.owner, record.title, *(record.created_at,) * 3),
        )
        counts.sessions += 1


async def _own_histories(
    tx: Tx, records: list[tuple[int, Any]], table: str, columns: tuple[str, str], what: Callable[[Any], str]
) -> None:
    """Refuse to merge into a history (a store's, a file's: the records sharing `columns`) that holds versions the
    bundle lacks here: one of them would stop being current."""
    carried: dict[tuple[str, str], set[str]] = defaultdict(set)
    first: dict[tuple[str, str], tuple[int, Any]] = {}
    for number, record in records:
        key = (getattr(record, columns[0]), getattr(record, columns[1]))
        carried[key].add(record.id)
        first.setdefault(key, (number, record))
    for key, ids in carried.items():
        sql = f"SELECT id FROM {table} WHERE {columns[0]} = ? AND {columns[1]} = ?"
        if extra := {str(row[0]) for row in await tx.fetchall(sql, key)} - ids:
            number, record = first[key]
            raise BundleError(
                f"line {number}: {what(record)} already has {len(extra)} versions of its own here, which the bundle "
                "lacks; import into a state without them (a fresh data dir), or export this one and merge by hand."
            )


async def _owners(tx: Tx, versions: list[tuple[int, MemoryVersion]]) -> None:
    """A session's store must name a session of its own agent, carried in the bundle or here already."""
    checked: set[tuple[str, str]] = set()
    for number, version in versions:
        if version.session_id is None or (version.session_id, version.agent_id) in checked:
            continue
        owner = await tx.scalar("SELECT agent_id FROM sessions WHERE id = ?", (version.session_id,))
        if owner != version.agent_id:
            whose = "neither in the bundle nor here" if owner is None else f"agent {owner}'s"
            raise BundleError(f"line {number}: {version.target} of agent {version.agent_id} belongs to session "
                              f"{version.session_id}, which is {whose}.")  # fmt: skip
        checked.add((version.session_id, version.agent_id))


async def _memory(
    tx: Tx,
    versions: list[tuple[int, MemoryVersion]],
    heads: list[tuple[int, MemoryHead]],
    counts: Counts,
    step: Callable[[], None],
) -> None:
    await _own_histories(tx, versions, "memory_versions", ("scope", "target"), lambda v: f"{v.target} in {v.scope}")
    await _owners(tx, versions)
    content = {version.id: version for _, version in versions}
    for _, version in await _absent(tx, "memory_versions", ("content_hash",), versions, counts=counts, step=step):
        await tx.execute(
            "INSERT INTO memory_versions (id, scope, target, agent_id, session_id, wake_id, created_at, source, mode, "
            "content_hash, size_bytes, preview, content, provenance, seq, depth) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM memory_versions WHERE scope = ? AND target = ?), 0)",
            (
                version.id,
                version.scope,
                version.target,
                version.agent_id,
                version.session_id,
                version.wake_id,
                version.created_at,
                version.source,
                version.mode,
                version.content_hash,
                len(version.content.encode("utf-8")),
                memory.preview(version.content),
                version.content,
                Provenance(sources=version.provenance).to_json(),
                version.scope,
                version.target,
            ),
        )  # fmt: skip  (whole texts, next in commit order: the bundle lists each history in that order)
        counts.memory_versions += 1
    for _, head in heads:
        step()
        version = content[head.version_id]
        current = "SELECT version_id FROM memory_documents WHERE scope = ? AND target = ?"
        if await tx.scalar(current, (head.scope, head.target)) == head.version_id:
            counts.already += 1
            continue
        await tx.execute(
            "INSERT INTO memory_documents (scope, target, agent_id, session_id, content, content_hash, version_id, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(scope, target) DO UPDATE SET "
            "content = excluded.content, content_hash = excluded.content_hash, version_id = excluded.version_id, "
            "updated_at = excluded.updated_at",
            (head.scope, head.target, version.agent_id, version.session_id, version.content, version.content_hash,
             version.id, version.created_at),
        )  # fmt: skip
        await search.upsert(
            tx,
            key=f"memory:{head.scope}:{head.target}",
            source=head.target,
            agent_id=version.agent_id,
            session_id=version.session_id,
            title=memory.searchable_title(head.target, version.session_id),
            body=version.content,
        )
        counts.stores += 1


async def _learnings(tx: Tx, records: list[tuple[int, Learning]], counts: Counts, step: Callable[[], None]) -> None:
    for _, record in await _absent(tx, "learnings", ("title", "detail"), records, counts=counts, step=step):
        await learnings.insert(
            tx,
            learnings.Learning(
                **record.model_dump(
                    include={"id", "agent_id", "session_id", "title", "detail", "created_at", "state", "supersedes"}
                ),
                kind=record.type,
                promote_to_memory=record.promoted,
                provenance=Provenance(sources=record.provenance),
            ),
        )
        counts.learnings += 1


async def _substrate(
    tx: Tx, records: list[tuple[int, SubstrateVersion]], counts: Counts, step: Callable[[], None]
) -> None:
    columns = ("agent_id", "target_path")
    await _own_histories(tx, records, "substrate_versions", columns, lambda r: f"{r.target_path} of agent {r.agent_id}")
    # In bundle order: a file's history is in the order its versions are appended.
    for _, record in await _absent(tx, "substrate_versions", ("content_hash",), records, counts=counts, step=step):
        fields = record.model_dump(exclude={"kind", "content", "provenance"})
        version = substrate.SubstrateVersion(
            **fields,
            size_bytes=len(record.content.encode("utf-8")),
            preview=memory.preview(record.content),
            provenance=Provenance(sources=record.provenance),
        )
        await substrate.insert_version(tx, version, record.content)
        counts.substrate_versions += 1
