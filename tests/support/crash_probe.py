"""Test-only tools (`--tools-module crash_probe.py`): the real promotion, with the process killed at one exact point
of it, as `kill -9` would: after the file's rename but before the commit, after the pending-write note but before
the write, or inside the write (its temporary file made, not yet renamed). No cleanup runs (os._exit), so the next
start-up sees what a crash leaves."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, Literal

from managed_tools.sandbox import files
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments, WireModel
from managed_tools.tools.substrate.promotion import PromoteArgs, PromoteOutput, resources_promote_to_substrate

KILLED = 137


class WriteArgs(Arguments):
    path: str
    content: str


class WriteOutput(WireModel):
    path: str


async def write_then_die(ctx: ToolContext, args: WriteArgs) -> WriteOutput:
    """The real atomic write, killed between writing its temporary file and renaming it into place."""
    resolved = ctx.runtime.guard.resolve(args.path, "write")
    files.os.replace = _die  # type: ignore[attr-defined]  # (the process ends at it: no one else sees the patch)
    files.atomic_write(resolved, args.content.encode())
    raise AssertionError


class DieArgs(PromoteArgs):
    die: Literal["after_rename", "before_rename", "in_write"]


def _die(*_: Any, **__: Any) -> Any:
    os._exit(KILLED)


async def promote_then_die(ctx: ToolContext, args: DieArgs) -> PromoteOutput:
    if args.die == "before_rename":
        vars(files)["replace_file"] = _die  # the note is on disk; the file is not touched yet
    elif args.die == "in_write":  # the temporary file written and synced, its rename never made
        vars(files)["os"] = SimpleNamespace(**{**vars(os), "replace": _die})  # files' own `os` only: the note's
        # rename (stores/substrate.py) is made first and still happens
    await resources_promote_to_substrate(ctx, args)
    _die()  # renamed into place, its version recorded in the open transaction, nothing committed
    raise AssertionError


TOOLS = (
    ToolDefinition(
        name="probe_write_then_die",
        title="Write, then die",
        description="Test tool: the real atomic file write with the process killed before its rename.",
        input_model=WriteArgs,
        output_model=WriteOutput,
        handler=write_then_die,
        read_only=False,
        effects=("resource_write",),
    ),
    ToolDefinition(
        name="probe_promote_then_die",
        title="Promote, then die",
        description="Test tool: the real promotion with the process killed before its commit.",
        input_model=DieArgs,
        output_model=PromoteOutput,
        handler=promote_then_die,
        read_only=False,
        effects=("resource_write",),
    ),
)
