"""`managed-tools adopt`: move an old in-workspace data dir (`<workspace>/.managed-tools`) to the data dir.

Serving never reads that directory: a workspace is anyone's input (a cloned repository can ship one), and what it
holds would configure the server (config.json's `policy` pre-approves tools, its `mcpServers` start programs, its
`sandbox`, `autoSandboxed`, `secretScanning`, `models` and `telemetry` loosen the sandbox or send data away) and
seed its approvals and memory (state.db). Only a person moves it, after seeing what it takes: every file and its
size, every configuration key with its value (a map, entry by entry), and the rows of the database. Nothing is
cut: a long value is wrapped over indented lines, so a payload after padding is on screen too.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from managed_tools.server.config.data_dir import LEGACY_DIR, default_data_dir, move_into_place, overlap
from managed_tools.server.consent.human import HumanError

MAX_FILES_SHOWN = 40
MAX_CONFIG_BYTES = 1 << 20
WRAP_CHARS = 120  # a longer line goes on over indented lines: shown whole, never cut
CONTINUED = "    "  # a continuation's indent; a line of its own starts with none, so none can pose as one
# Tables whose rows would become this server's own: who approved what, what it remembers, its secrets.
COUNTED_TABLES = ("sessions", "events", "approvals", "memory_versions", "learnings", "vault_secrets")


def adopt(
    workspace: Path | None,
    data_dir: Path | None,
    *,
    yes: bool,
    ask: Callable[[str], str] = input,
    interactive: bool | None = None,
) -> int:
    """Show what `<workspace>/.managed-tools` holds, ask (or take --yes), and move it to the data dir."""
    root = (workspace or Path.cwd()).expanduser().resolve()
    target = data_dir.expanduser().resolve() if data_dir else default_data_dir(root)
    legacy = root / LEGACY_DIR
    if not legacy.is_dir() or legacy.is_symlink():
        raise HumanError(f"No old data dir at {legacy} (a real directory): nothing to adopt.")
    if (problem := overlap(target, {"the workspace": root})) is not None:
        raise HumanError(problem)
    if target.exists():
        raise HumanError(
            f"The data dir {target} already exists; adopt never merges. Move it aside first, or choose another "
            "--data-dir."
        )
    print(f"{legacy} would become the data dir {target}: this server's own configuration and state.")
    for line in describe(legacy):
        print(f"  {line}")
    print("Adopt only a directory you made yourself: a cloned repository can ship one, to grant itself permissions.")
    if not yes:
        if not (sys.stdin.isatty() if interactive is None else interactive):
            raise HumanError("Not adopted: no terminal to ask on. Read the above, then run again with --yes.")
        if ask("Adopt it? [y/N] ").strip().lower() not in ("y", "yes"):
            print("Not adopted; nothing changed.")
            return 1
    if not move_into_place(legacy, target):
        raise HumanError(f"Not adopted: {target} appeared meanwhile (another process?); nothing was merged.")
    print(f"Moved {legacy} to {target}.")
    return 0


def describe(legacy: Path) -> Iterator[str]:
    """What adopting takes: the files, the configuration's keys with their values, the database; each line
    wrapped to WRAP_CHARS, never cut."""
    for line in _described(legacy):
        yield line[:WRAP_CHARS]
        width = WRAP_CHARS - len(CONTINUED)
        yield from (CONTINUED + line[at : at + width] for at in range(WRAP_CHARS, len(line), width))


def _described(legacy: Path) -> Iterator[str]:
    yield from _files(legacy)
    config = legacy / "config.json"
    if config.is_file() and not config.is_symlink():
        yield from _config(config)
    state = legacy / "state.db"
    if state.is_file() and not state.is_symlink():
        yield from _database(state)


def _files(legacy: Path) -> Iterator[str]:
    count = total = 0
    for here, dirs, names in os.walk(legacy, followlinks=False):
        dirs.sort()
        for name in sorted(names) + [d for d in dirs if os.path.islink(os.path.join(here, d))]:
            path = os.path.join(here, name)
            relative = _shown(os.path.relpath(path, legacy))
            info = os.lstat(path)
            count += 1
            total += info.st_size
            if count <= MAX_FILES_SHOWN:
                link = f" -> {_shown(os.readlink(path))}" if os.path.islink(path) else ""
                yield f"file {relative} ({_size(info.st_size)}){link}"
    if count > MAX_FILES_SHOWN:
        yield f"... and {count - MAX_FILES_SHOWN} more files"
    yield f"{count} file{'' if count == 1 else 's'}, {_size(total)} in all"


def _config(path: Path) -> Iterator[str]:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            yield f"config.json: over {_size(MAX_CONFIG_BYTES)}, not shown; read it before adopting"
            return
        loaded: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        yield f"config.json: not readable as JSON ({type(exc).__name__}); the server would refuse to start with it"
        return
    if not isinstance(loaded, dict):
        yield "config.json: not a JSON object; the server would refuse to start with it"
        return
    yield ("config.json keys: " + _shown(", ".join(str(k) for k in loaded))) if loaded else "config.json: empty"
    # Every key with its value: which ones grant is the server's to judge, not a list here that could fall behind.
    for key, value in loaded.items():
        if isinstance(value, dict) and value:
            for name, entry in value.items():
                yield f"config.json {_shown(str(key))}.{_shown(str(name))}: {_shown(json.dumps(entry))}"
        else:
            yield f"config.json {_shown(str(key))}: {_shown(json.dumps(value))}"


def _database(path: Path) -> Iterator[str]:
    try:
        # Read-only, as immutable: nothing is written beside the file (no -shm, no journal) in the workspace.
        with sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True) as conn:
            present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            counts = [
                f"{table} {conn.execute(f'SELECT count(*) FROM {table}').fetchone()[0]}"  # fixed names
                for table in COUNTED_TABLES
                if table in present
            ]
    except sqlite3.Error as exc:
        yield f"state.db: not readable as SQLite ({exc})"
        return
    yield "state.db rows (its approvals, memory and secrets become this server's): " + (", ".join(counts) or "none")


def _shown(text: str) -> str:
    """One line, control and non-ASCII characters escaped: a file name or value from the workspace cannot forge
    lines or hide behind bidi overrides."""
    return text.encode("unicode_escape").decode("ascii")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"
