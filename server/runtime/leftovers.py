"""At start-up, what a killed server left behind goes: the temporary files of its interrupted writes (only ours,
only where its records say it was writing) and attachment files whose row never committed."""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

import anyio

from managed_tools.sandbox import files
from managed_tools.sandbox.paths import PathGuard
from managed_tools.stores import attachments
from managed_tools.stores.db import Database
from managed_tools.stores.errors import StoreError
from managed_tools.stores.interrupted import unfinished_call_paths

log = logging.getLogger("managed_tools.leftovers")
KEY_FILE = "temp-files.key"
KEY_BYTES = 32


def temp_key(data_dir: Path) -> bytes:
    """The data dir's key for marking temporary files as ours (sandbox/files.py): made once, kept 0600 in the
    data dir, which no mount reaches, so nothing a tool runs can forge our mark."""
    path = data_dir / KEY_FILE
    data_dir.mkdir(parents=True, exist_ok=True)  # on PostgreSQL nothing else may have made it yet
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) == KEY_BYTES:
            return key
        raise StoreError(f"{path} is not a key this server made; remove it and start again.") from None
    key = secrets.token_bytes(KEY_BYTES)
    with os.fdopen(fd, "wb") as out:
        out.write(key)
        out.flush()
        os.fsync(out.fileno())
    return key


def mark_ours(data_dir: Path) -> None:
    """From now on this process's temporary files carry the data dir's mark, and those of earlier runs are known."""
    files.use_temp_key(temp_key(data_dir))


async def sweep(db: Database, guard: PathGuard, data_dir: Path) -> None:
    """Remove what interrupted writes left; a store that cannot be read or written now only skips this."""
    try:
        async with db.read() as tx:
            paths = await unfinished_call_paths(tx)
        temps = await anyio.to_thread.run_sync(_remove_temps, guard, paths)
        async with db.write() as tx:
            orphans = await attachments.remove_orphans(tx, data_dir)
    except (StoreError, OSError) as exc:
        log.warning("left-behind files of an interrupted run were not swept: %s", exc)
        return
    if temps or orphans:
        log.info(
            "removed %d temporary file(s) and %d attachment file(s) an interrupted run left behind", temps, orphans
        )


def _remove_temps(guard: PathGuard, paths: list[str]) -> int:
    removed = 0
    for path in paths:
        try:
            # A kill an instant before this start leaves a young file: wait it out rather than keep it for good.
            removed += files.remove_stale_temps(guard.resolve(path, "modify"), young="wait")
        except StoreError:
            continue  # a path the guard refuses, or a directory gone since: nothing of ours there
    return removed
