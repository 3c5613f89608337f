"""Skills on disk: `SKILL.md` files found under the skill directories, parsed once per change.

A directory is an anchor (a root the user chose: the workspace, the agent's substrate, a configured directory)
and a relative prefix below it. Files are opened beneath the anchor without following any symbolic link
(`fsaccess.open_beneath`), and the walk follows none either, so a skill that links out of its directory is never
read. Later directories override earlier ones by name; entries are sorted by name (reference §8).
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from managed_tools.sandbox.fsaccess import open_beneath, opened
from managed_tools.stores.ids import sha256_hex

log = logging.getLogger("managed_tools.skills")
SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 256 * 1024
MAX_SKILLS = 500
MAX_DEPTH = 6
PREVIEW_CHARS = 220
NO_DESCRIPTION = "No description provided."
SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


@dataclass(frozen=True)
class SkillDir:
    """`anchor/prefix`, shown to the model as `shown` (a virtual path or a `skill:` label, never a host path)."""

    source: str
    anchor: Path
    prefix: str
    shown: str

    @property
    def path(self) -> Path:
        return self.anchor / self.prefix if self.prefix else self.anchor


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    preview: str
    source: str
    file_path: str  # as shown: virtual path below the directory's `shown`
    base_dir: str
    content: str
    sha256: str


@dataclass(frozen=True)
class SkillFilter:
    enabled: bool = True
    include: tuple[str, ...] | None = None  # a name allowlist; empty allows nothing


def _frontmatter(text: str) -> tuple[dict[str, object], str]:
    match = _FRONTMATTER.match(text)
    if match is None:
        return {}, text
    import yaml  # here, not at the top: only a skill with frontmatter needs it (~15 ms a start-up would pay)

    loaded = yaml.safe_load(match.group(1))
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ValueError("the frontmatter is not a mapping")
    return loaded, text[match.end() :]


def parse_skill(text: str, folder: str) -> tuple[str, str, str]:
    """(name, description, preview) of a SKILL.md; name falls back to its folder, description to the first line
    of prose. Raises ValueError for frontmatter that is not a YAML mapping or fields that are not text."""
    fields, body = _frontmatter(text)
    name, description = fields.get("name", folder), fields.get("description")
    if not isinstance(name, str) or (description is not None and not isinstance(description, str)):
        raise ValueError("name and description must be text")
    lines = [line.strip() for line in body.splitlines() if line.strip() and line.strip() != "---"]
    if not description or not description.strip():
        description = next((line for line in lines if not line.startswith("#")), NO_DESCRIPTION)
    return name.strip(), " ".join(description.split()), " ".join(lines[:3])[:PREVIEW_CHARS]


def _no_links(anchor: Path, prefix: str) -> bool:
    """The prefix exists as real directories below the anchor (no symbolic link anywhere on the way)."""
    current = anchor
    for part in [p for p in prefix.split("/") if p]:
        current = current / part
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return False
        except OSError:
            return False
    return os.path.isdir(anchor)


def _files(directory: SkillDir) -> list[str]:
    """Paths of SKILL.md files relative to the anchor: regular files only, links neither followed nor taken."""
    if not _no_links(directory.anchor, directory.prefix):
        return []
    found: list[str] = []
    top = directory.path
    for here, dirs, files in os.walk(top, followlinks=False):
        relative = os.path.relpath(here, directory.anchor).replace(os.sep, "/")
        depth = 0 if here == str(top) else os.path.relpath(here, top).count(os.sep) + 1
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if depth < MAX_DEPTH else []
        if SKILL_FILE in files:
            path = os.path.join(here, SKILL_FILE)
            if stat.S_ISREG(os.lstat(path).st_mode):
                found.append(SKILL_FILE if relative == "." else f"{relative}/{SKILL_FILE}")
            else:
                log.warning("skipping a skill file that is not a regular file (a link?) in %s", directory.shown)
    return found


def _read(anchor: Path, relative: str) -> str:
    with opened(open_beneath(str(anchor), relative, os.O_RDONLY | os.O_NONBLOCK)) as fd:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SKILL_BYTES:
            raise ValueError(f"not a regular file of at most {MAX_SKILL_BYTES} bytes")
        return os.read(fd, MAX_SKILL_BYTES + 1).decode("utf-8")


def load(directories: list[SkillDir], keep: SkillFilter) -> dict[str, Skill]:
    """The skills of `directories`, later ones overriding earlier by name, filtered, sorted by name."""
    if not keep.enabled:
        return {}
    skills: dict[str, Skill] = {}
    for directory in directories:
        for relative in _files(directory):
            import yaml  # its error type, once there is a skill to parse (see `_frontmatter`)

            below = relative.removeprefix(directory.prefix).lstrip("/") if directory.prefix else relative
            folder = below.rsplit("/", 2)[-2] if "/" in below else directory.path.name
            try:
                content = _read(directory.anchor, relative)
                name, description, preview = parse_skill(content, folder)
            except (OSError, ValueError, yaml.YAMLError) as exc:
                log.warning("skipping the skill %s/%s: %s", directory.shown, below, type(exc).__name__)
                continue
            if not SKILL_NAME.match(name):
                log.warning("skipping the skill %s/%s: its name is not a simple name", directory.shown, below)
                continue
            base = below.rsplit("/", 1)[0] if "/" in below else ""
            shown_base = f"{directory.shown}/{base}" if base else directory.shown
            skills[name] = Skill(
                name=name,
                description=description,
                preview=preview,
                source=directory.source,
                file_path=f"{shown_base}/{SKILL_FILE}",
                base_dir=shown_base,
                content=content,
                sha256=sha256_hex(content.encode("utf-8")),
            )
    if keep.include is not None:
        skills = {n: s for n, s in skills.items() if n in keep.include}
    return {name: skills[name] for name in sorted(skills)[:MAX_SKILLS]}


class SkillSet:
    """The current skills of a runtime, reloaded on demand (a skills tool call, the watcher)."""

    def __init__(self, directories: list[SkillDir] | None = None, keep: SkillFilter | None = None) -> None:
        self.directories = list(directories or [])
        self.keep = keep or SkillFilter()
        self._lock = threading.Lock()
        self._skills: dict[str, Skill] = {}
        self.version = 0
        self.reload()

    def reload(self) -> bool:
        """Read the directories again; True if any skill appeared, went or changed."""
        fresh = load(self.directories, self.keep)
        with self._lock:
            changed = {n: s.sha256 for n, s in fresh.items()} != {n: s.sha256 for n, s in self._skills.items()}
            if changed:
                self._skills = fresh
                self.version += 1
            return changed

    def all(self) -> list[Skill]:
        with self._lock:
            return list(self._skills.values())

    def get(self, name: str) -> Skill | None:
        with self._lock:
            return self._skills.get(name)

    def watched(self) -> list[Path]:
        """The directories that exist now, for a watcher."""
        return [d.path for d in self.directories if _no_links(d.anchor, d.prefix)]
