"""Listing and searching large trees with ripgrep (the `ripgrep` wheel ships the `rg` binary).

ripgrep honours .gitignore, skips binary files and never loads a whole file into memory, which is what grep and
glob need on trees of tens of thousands of files. It runs as an argv list (no shell), with `--` before the
pattern and the path so nothing a model writes can become a flag.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio

from managed_tools.errors import StoreError
from managed_tools.sandbox.spawn import Domain, spawn

MAX_PREVIEW_CHARS = 240
RG_ENV: dict[str, str] = {}  # rg needs nothing from the environment: it spawns nothing for these searches
READ_CHUNK = 65536
LAUNCH_FAILED = 126  # the launcher's exit status when it could not confine or start rg (rg itself: 0-2)


def rg_binary() -> str:
    beside = Path(sys.executable).with_name("rg")
    found = str(beside) if beside.exists() else shutil.which("rg")
    if found is None:
        raise StoreError("ripgrep (rg) is not installed; reinstall managed-tools-mcp, which depends on it.")
    return found


def _rg(*args: str) -> list[str]:
    return [rg_binary(), "--no-config", "--no-ignore-global", *args]


@dataclass(frozen=True)
class Match:
    path: str  # relative to the searched root
    line: int
    column: int
    text: str


async def _lines(argv: list[str], cwd: Path, confine: Domain | None) -> AsyncIterator[str]:
    """Stdout of rg, line by line, confined to `confine`; the process is killed as soon as the caller stops
    reading (asyncio, not anyio: only it takes a `preexec_fn`, the fallback way into a domain)."""
    child = await spawn(
        argv, domain=confine, cwd=cwd, env=RG_ENV, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE
    )
    process = child.process
    finished = False
    try:
        assert process.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        buffer = ""
        while chunk := await process.stdout.read(READ_CHUNK):
            buffer += decoder.decode(chunk)
            *complete, buffer = buffer.split("\n")
            for line in complete:
                yield line
        buffer += decoder.decode(b"", final=True)
        if buffer:
            yield buffer
        finished = True
    finally:
        with anyio.CancelScope(shield=True):
            if not finished and process.returncode is None:
                # os.kill, not Process.kill: the latter reaps the child behind asyncio's back ("Unknown child").
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
            await process.wait()
            child.end()
    if process.returncode == LAUNCH_FAILED:
        raise StoreError("ripgrep could not be started confined (see the server log); nothing was searched.")


def _exclusions(root: Path, excluded: list[Path]) -> list[str]:
    flags = ["--no-require-git", "--glob=!.git"]
    for path in excluded:
        try:
            relative = os.path.relpath(path, root)
        except ValueError:
            continue
        if not relative.startswith(".."):
            flags.append(f"--glob=!/{relative}")
    return flags


async def list_files(root: Path, excluded: list[Path], limit: int, *, confine: Domain | None) -> tuple[list[str], bool]:
    """Files under `root` (relative, sorted), honouring .gitignore; and whether more than `limit` existed."""
    argv = _rg("--files", "--hidden", "--sort=path", *_exclusions(root, excluded), "--", ".")
    found: list[str] = []
    async for line in _lines(argv, root, confine):
        if line:
            found.append(line.removeprefix("./"))
            if len(found) > limit:
                return found[:limit], True
    return found, False


async def search(
    root: Path,
    target: str,
    query: str,
    *,
    regex: bool,
    case_sensitive: bool,
    glob: str | None,
    per_file: int,
    limit: int,
    excluded: list[Path],
    confine: Domain | None,
) -> tuple[list[Match], bool]:
    """Matches of `query` under `root` (or in one file), at most `per_file` per file and `limit` in all."""
    argv = _rg("--json", "--hidden", "--sort=path", f"--max-count={per_file}")
    argv += [] if case_sensitive else ["--ignore-case"]
    argv += [] if regex else ["--fixed-strings"]
    argv += [f"--glob={glob}"] if glob else []
    argv += _exclusions(root, excluded)
    argv += [f"--regexp={query}", "--", target]
    matches: list[Match] = []
    async for line in _lines(argv, root, confine):
        if not line.startswith(('{"type":"match"', '{"type":"error"')):
            continue  # begin/end/context/summary lines: skipping them halves the parsing
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("type") != "match":
            if event.get("type") == "error":
                raise StoreError(f"grep failed: {event.get('data')}")
            continue
        data = event["data"]
        text = data["lines"].get("text", "")
        first = data["submatches"][0] if data.get("submatches") else {"start": 0}
        matches.append(
            Match(
                path=data["path"].get("text", "").removeprefix("./"),
                line=int(data["line_number"]),
                column=len(text.encode()[: first["start"]].decode(errors="ignore")) + 1,
                text=text.rstrip("\r\n"),
            )
        )
        if len(matches) > limit:
            return matches[:limit], True
    return matches, False


async def check_pattern(query: str, *, confine: Domain | None) -> str | None:
    """rg's own message when `query` is not a valid regular expression, else None."""
    child = await spawn(
        _rg(f"--regexp={query}", "--", os.devnull),
        domain=confine,
        env=RG_ENV,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    process = child.process
    _, stderr = await process.communicate()
    child.end()
    if process.returncode == LAUNCH_FAILED:
        raise StoreError("ripgrep could not be started confined; nothing was searched.")
    if process.returncode == 2:
        return stderr.decode(errors="replace").strip().splitlines()[-1][:300]
    return None
