"""Watching the workspace and the substrate on disk, so a change made outside the tools is notified too.

The watcher starts only when a client looks at file resources (lists them or subscribes to one): a client that
only calls tools never pays for it. A tree too large for the OS's watch limit is logged and left unwatched;
reads still show the current content.
"""

from __future__ import annotations

import logging
import os

import anyio
from watchfiles import awatch

from managed_tools.server.mcp.resources import Notifier, skill_uri
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.context.uris import file_uri

log = logging.getLogger("managed_tools.watch")
DEBOUNCE_MS = 300


def _targets(runtime: Runtime) -> tuple[list[tuple[str, str]], str]:
    """(mount path, real root) of the substrate and the workspace, the substrate first (it lies in the data
    dir), and the real data dir."""
    wanted = {"agent_substrate": 0, "workspace": 1}
    mounts = sorted((m for m in runtime.guard.mounts if m.kind in wanted), key=lambda m: wanted[m.kind])
    roots = [(m.mount_path, os.path.realpath(m.root)) for m in mounts]
    return roots, os.path.realpath(runtime.environment.data_dir)


def uri_for(path: str, roots: list[tuple[str, str]], private: str) -> str | None:
    for mount_path, root in roots:
        if path.startswith(root + os.sep):
            relative = path[len(root) + 1 :]
            if mount_path == "/workspace" and (path.startswith(private + os.sep) or path == private):
                return None
            if relative.split(os.sep)[0] == ".git":
                return None
            return file_uri(mount_path, relative.replace(os.sep, "/"))
    return None


async def watch_when_asked(start: anyio.Event, stop: anyio.Event, runtime: Runtime, notifier: Notifier) -> None:
    """Watch from `start` until `stop` (set it before cancelling: the watcher thread only checks it)."""
    await start.wait()
    roots, private = await anyio.to_thread.run_sync(_targets, runtime)
    try:
        async for changes in awatch(
            *(root for _, root in roots), debounce=DEBOUNCE_MS, step=50, stop_event=stop, rust_timeout=500
        ):
            uris = {uri for _, path in changes if (uri := uri_for(path, roots, private)) is not None}
            if uris:
                await notifier.updated(sorted(uris))
    except (OSError, RuntimeError) as exc:  # e.g. the inotify watch limit on a huge tree
        log.warning("not watching files for changes: %s", exc)


async def watch_skills(stop: anyio.Event, runtime: Runtime, notifier: Notifier) -> None:
    """Reload the skill set when a file in a skill directory that exists changes; tell who listens if it did
    (the list, and each skill that changed or went). Skills tool calls reload anyway, watched or not."""
    directories = [str(p) for p in await anyio.to_thread.run_sync(runtime.skills.watched)]
    if not directories:
        return
    try:
        async for _ in awatch(*directories, debounce=DEBOUNCE_MS, step=50, stop_event=stop, rust_timeout=500):
            before = {s.name: s.sha256 for s in runtime.skills.all()}
            if not await anyio.to_thread.run_sync(runtime.skills.reload):
                continue
            after = {s.name: s.sha256 for s in runtime.skills.all()}
            await notifier.list_changed()
            gone_or_changed = sorted(name for name, digest in before.items() if after.get(name) != digest)
            await notifier.updated(skill_uri(name) for name in gone_or_changed)
    except (OSError, RuntimeError) as exc:
        log.warning("not watching skills for changes: %s", exc)


async def watch_tools(runtime: Runtime, notifier: Notifier) -> None:
    """Tell who listens when the published tools change (an upstream server's came, went or changed)."""
    while True:
        await runtime.registry.changed()
        await notifier.tools_changed()
