"""Test-only tools (`--tools-module crash_probe.py`): the real promotion, with the process killed at one exact point
of it, as `kill -9` would: after the file's rename but before the commit, or after the pending-write note but
before the rename. No cleanup runs (os._exit), so the next start-up sees what a crash leaves."""

from __future__ import annotations

import os
from typing import Any, Literal

from managed_tools.tools.framework.context import ToolContext
from managed_tools.tools.framework.definition import ToolDefinition
from managed_tools.tools.substrate import access
from managed_tools.tools.substrate.promotion import PromoteArgs, PromoteOutput, resources_promote_to_substrate

KILLED = 137


class DieArgs(PromoteArgs):
    die: Literal["after_rename", "before_rename"]


def _die(*_: Any) -> Any:
    os._exit(KILLED)


async def promote_then_die(ctx: ToolContext, args: DieArgs) -> PromoteOutput:
    if args.die == "before_rename":
        vars(access)["replace_file"] = _die  # the note is on disk; the file is not touched yet
    await resources_promote_to_substrate(ctx, args)
    _die()  # renamed into place, its version recorded in the open transaction, nothing committed
    raise AssertionError


TOOLS = (
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
