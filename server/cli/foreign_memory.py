"""`managed-tools memory import --from reference-memory FILE | basic-memory DIR`: what users bring from two other
memory servers, made learnings of one agent, each with provenance `import` naming its file and line (or note).

- The reference MCP memory server (modelcontextprotocol/servers, src/memory) keeps a knowledge graph as JSON lines:
  `{"type":"entity","name","entityType","observations":[...]}` and `{"type":"relation","from","to","relationType"}`.
  Each entity becomes one learning (its observations, then its relations); a relation whose `from` is no entity
  of the file becomes a learning of its own.
- basic-memory keeps markdown notes: YAML front matter (title, type, tags, permalink; other keys are its users'
  own), observations `- [category] text #tag`, relations `- relation_type [[Target]]`. Each note becomes one
  learning: its title, and its type, tags and text as the detail.

Imported text is another program's (often a model's): it is recorded `untrusted`, a credential the secret scanner
finds in it is masked before it is stored (memory is reread by every later session; secrets belong in the vault),
and it never configures anything: it lands only as learnings. A note that is a symbolic link, or a line or file
past its bound, stops the import with one line, and nothing is written.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from managed_tools.server.cli.carrying import Ticker, open_source, warn_secrets, write_all
from managed_tools.server.config.state_place import StatePlace
from managed_tools.server.consent.human import HumanError
from managed_tools.stores import bundle, learnings
from managed_tools.stores.db import Tx
from managed_tools.stores.ids import sha256_hex
from managed_tools.stores.provenance import MAX_SOURCES, Provenance, Source
from managed_tools.tools.framework.wire import secret_scan

MAX_LINE_BYTES = 1024 * 1024  # one entity and its observations
MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_NOTE_BYTES = 1024 * 1024
MAX_NOTES = 100_000
OBSERVATION = re.compile(r"^\s*[-*]\s+\[([^\]\n]+)\]\s+\S", re.MULTILINE)
RELATION = re.compile(r"^\s*[-*]\s+([^\s\[\]]+)\s+\[\[([^\]\n]+)\]\]", re.MULTILINE)
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


@dataclass
class Item:
    """One learning to be: its text and where each part of it came from."""

    title: str
    lines: list[str]
    sources: list[str]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Entity(_Strict):
    type: Literal["entity"]
    name: Annotated[str, Field(min_length=1)]
    entity_type: Annotated[str, Field(alias="entityType")]
    observations: list[str]


class Relation(_Strict):
    type: Literal["relation"]
    source: Annotated[str, Field(alias="from", min_length=1)]
    to: Annotated[str, Field(min_length=1)]
    relation_type: Annotated[str, Field(alias="relationType", min_length=1)]


_LINE: TypeAdapter[Entity | Relation] = TypeAdapter(Annotated[Entity | Relation, Field(discriminator="type")])


def reference_memory(path: Path) -> list[Item]:
    """The entities of a reference memory file, in file order, each with its relations folded in."""
    entities: dict[str, Item] = {}
    loose: list[Item] = []
    with open_source(path) as handle:
        lines = bundle.bounded_lines(handle, str(path), max_line=MAX_LINE_BYTES, max_total=MAX_FILE_BYTES)
        for number, raw in lines:
            if not raw.strip():
                continue  # the reference server skips blank lines too
            try:
                record = _LINE.validate_json(raw)
            except ValidationError as exc:
                first = exc.errors(include_url=False, include_input=False)[0]
                where = ".".join(str(p) for p in first["loc"])
                raise HumanError(f"{path} line {number}: {where + ': ' if where else ''}{first['msg']}.") from exc
            source = f"{path}:{number}"
            if isinstance(record, Entity):
                item = entities.setdefault(record.name, Item(f"{record.name} ({record.entity_type})", [], []))
                item.lines += [f"- {o}" for o in record.observations if f"- {o}" not in item.lines]
                item.sources.append(source)
                continue
            sentence = f"{record.source} {record.relation_type} {record.to}"
            if (owner := entities.get(record.source)) is not None:
                owner.lines.append(f"- {record.relation_type} → {record.to}")
                owner.sources.append(source)
            else:
                loose.append(Item(sentence, [f"A relation of the knowledge graph: {sentence}."], [source]))
    return [*entities.values(), *loose]


class FrontMatter(BaseModel):
    """The keys basic-memory reads; the others are its users' own (kept out of the learning, never refused)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    title: str | None = None
    type: str | None = None
    tags: list[str] | str | None = None
    permalink: str | None = None


def _notes(root: Path) -> Iterator[Path]:
    """Every markdown note below `root`, in name order, refusing a symbolic link anywhere (a note must be a file
    inside DIR: a link could reach any file this user can read). Hidden entries (.git, .obsidian) are skipped."""
    count = 0
    stack = [root]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            listed = sorted(entries, key=lambda e: e.name)
        below: list[Path] = []
        for entry in listed:
            if entry.name.startswith("."):
                continue
            where = Path(entry.path)
            if entry.is_symlink():
                raise HumanError(
                    f"{where.relative_to(root)} in {root} is a symbolic link (to {os.readlink(where)}); a note must be "
                    "a regular file inside the directory. Nothing was imported."
                )
            if entry.is_dir(follow_symlinks=False):
                below.append(where)
            elif entry.name.endswith(".md") and entry.is_file(follow_symlinks=False):
                count += 1
                if count > MAX_NOTES:
                    raise HumanError(f"{root} holds more than {MAX_NOTES:,} notes: refused. Import a part of it.")
                yield where
        stack += reversed(below)  # the first folder by name is walked next


def _read_note(path: Path, shown: str) -> str:
    """A note's text, opened without following a link (one swapped in after the listing is refused too)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise HumanError(f"cannot read {shown}: {exc.strerror}. Nothing was imported.") from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise HumanError(f"{shown} is not a regular file. Nothing was imported.")
        data = handle.read(MAX_NOTE_BYTES + 1)
    if len(data) > MAX_NOTE_BYTES:
        raise HumanError(f"{shown} is larger than {MAX_NOTE_BYTES:,} bytes: refused. Nothing was imported.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HumanError(f"{shown} is not UTF-8 text (byte {exc.start}). Nothing was imported.") from exc


def _front_matter(text: str, shown: str) -> tuple[FrontMatter, str]:
    match = FRONT_MATTER.match(text)
    if match is None:
        return FrontMatter(), text
    try:
        loaded: Any = yaml.safe_load(match.group(1))  # data only: never a loader that builds objects
    except yaml.YAMLError as exc:
        said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise HumanError(f"{shown}: its front matter is not YAML ({said}). Nothing was imported.") from exc
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise HumanError(f"{shown}: its front matter is not a mapping of keys. Nothing was imported.")
    try:
        return FrontMatter.model_validate(loaded), text[match.end() :]
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise HumanError(f"{shown}: front matter {where}: {first['msg']}. Nothing was imported.") from exc


def basic_memory(root: Path) -> tuple[list[Item], int, int]:
    """Each note below `root` as an item; and how many observations and relations they hold."""
    if not root.is_dir():
        raise HumanError(f"{root} is not a directory of basic-memory notes.")
    items: list[Item] = []
    observations = relations = 0
    for path in _notes(root):
        shown = str(path.relative_to(root))
        matter, body = _front_matter(_read_note(path, shown), shown)
        title = (matter.title or path.stem).strip() or path.stem
        tags = matter.tags.split(",") if isinstance(matter.tags, str) else matter.tags or []
        about = [f"type: {matter.type or 'note'}"]
        about += [f"tags: {', '.join(t.strip() for t in tags if t.strip())}"] if tags else []
        about += [f"permalink: {matter.permalink}"] if matter.permalink else []
        text = body.strip()
        text = text.removeprefix(f"# {title}").strip()  # the note's heading repeats its title
        observations += len(OBSERVATION.findall(text))
        relations += len(RELATION.findall(text))
        items.append(Item(title, [" · ".join(about), *([text] if text else [])], [str(path)]))
    return items, observations, relations


async def _write(tx: Tx, items: list[Item], agent: str, label: str) -> tuple[int, int]:
    """The items as learnings of `agent`; returns (written, already here with the same text)."""
    rows = await tx.fetchall("SELECT title, detail FROM learnings WHERE agent_id = ?", (agent,))
    here = {sha256_hex(f"{row['title']}\x00{row['detail']}") for row in rows}
    ticker = Ticker("imported")
    written = already = 0
    for done, item in enumerate(items, 1):
        ticker(done, len(items))
        title, detail = item.title, "\n".join(item.lines)
        where = f"{label} {item.sources[0]}"
        if hits := warn_secrets([title, detail], where, "it is masked before it is stored."):
            title, detail = secret_scan.mask(title, hits), secret_scan.mask(detail, hits)
        key = sha256_hex(f"{title}\x00{detail}")
        if key in here:
            already += 1
            continue
        here.add(key)
        sources = tuple(Source(kind="import", name=f"{label} {s}", trust="untrusted") for s in item.sources)
        kept = Provenance(sources=sources[:1] + sources[1:][-(MAX_SOURCES - 1) :])  # the item's own line always
        await learnings.record(
            tx, agent_id=agent, session_id=None, kind="lesson", title=title, detail=detail, promote=False,
            provenance=kept,
        )  # fmt: skip
        written += 1
    return written, already


async def run(place: StatePlace, source: str, path: Path, agent: str, dry_run: bool) -> int:
    found = ""
    if source == "reference-memory":
        items = reference_memory(path)
    else:
        items, observations, relations = basic_memory(path)
        found = f" ({observations} observations, {relations} relations)"

    async def work(tx: Tx) -> tuple[int, int]:
        return await _write(tx, items, agent, source)

    written, already = await write_all(place, work, dry_run=dry_run)
    skipped = f"; {already} already here with the same text, skipped" if already else ""
    verb = "would import" if dry_run else "imported"
    kind = "entities and relations" if source == "reference-memory" else "notes"
    print(f"{verb} {written} learnings for agent {agent} from {len(items)} {kind}{found} in {path}{skipped}.")
    return 0
