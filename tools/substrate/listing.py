"""`resources_list`: the mounted resources and the shared substrate's files with their latest version, walked
through directory descriptors so a link is neither listed nor followed.
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

import anyio

from managed_tools.sandbox import fsaccess
from managed_tools.stores import substrate
from managed_tools.tools.environment.setup import MountedResource, mounted_resources
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import NoArguments, WireModel
from managed_tools.tools.substrate.access import SUBSTRATE

MAX_LISTED_FILES = 200


class SubstrateFile(WireModel):
    path: str
    size_bytes: int
    latest_version_id: str | None


class ListOutput(WireModel):
    session_id: str
    count: int
    resources: list[MountedResource]
    substrate_file_count: int
    substrate_files: list[SubstrateFile]
    substrate_files_truncated: bool


def _substrate_files(root: Path) -> list[tuple[str, int]]:
    """The regular files of the substrate (links are neither listed nor followed), sorted by path: walked through
    directory descriptors (os.fwalk), so a directory swapped for a link while we walk is not entered."""
    found: list[tuple[str, int]] = []
    try:
        with fsaccess.opened(fsaccess.open_beneath(os.path.realpath(root), "", fsaccess.LIST_FLAGS)) as root_fd:
            for directory, _, names, dir_fd in os.fwalk(".", dir_fd=root_fd):
                for name in names:
                    try:
                        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError:  # removed while we looked
                        continue
                    if stat.S_ISREG(info.st_mode):
                        found.append((posixpath.normpath(posixpath.join(directory, name)), info.st_size))
    except OSError as exc:
        raise fsaccess.refusal(SUBSTRATE, exc) from None
    return sorted(found)


async def resources_list(ctx: ToolContext, _: NoArguments) -> ListOutput:
    mount = next(m for m in ctx.runtime.guard.mounts if m.kind == "agent_substrate")
    files = await anyio.to_thread.run_sync(_substrate_files, mount.root)
    latest = await substrate.latest_versions(ctx.tx, ctx.agent_id)
    resources = mounted_resources(ctx.runtime)
    shown = [
        SubstrateFile(path=f"{SUBSTRATE}/{rel}", size_bytes=size, latest_version_id=latest.get(f"{SUBSTRATE}/{rel}"))
        for rel, size in files[:MAX_LISTED_FILES]
    ]
    return ListOutput(
        session_id=ctx.session_id,
        count=len(resources),
        resources=resources,
        substrate_file_count=len(files),
        substrate_files=shown,
        substrate_files_truncated=len(files) > MAX_LISTED_FILES,
    )


DEFINITIONS = (
    ToolDefinition(
        name="resources_list",
        title="List resources",
        description="List the mounts (workspace, the agent's substrate, vaults) and the substrate's files with their "
        "latest version.",
        input_model=NoArguments,
        output_model=ListOutput,
        handler=resources_list,
        effects=("resource_read",),
        idempotent=True,
    ),
)
