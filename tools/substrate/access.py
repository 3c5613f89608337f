"""How the substrate tools reach files: the substrate and draft paths they accept (a substrate file must be a real
file, a draft lives in the session workspace), bounded reads, the write that is a handler's last step and is undone
if its transaction rolls back, where a draft goes, and the line diff of two versions, computed off the event loop.
"""

from __future__ import annotations

from typing import Annotated

import anyio
from pydantic import Field

from managed_tools.sandbox.files import read_limited, read_text, replace_file
from managed_tools.sandbox.paths import Resolved
from managed_tools.stores import substrate
from managed_tools.stores.ids import sha256_hex
from managed_tools.stores.substrate import SubstrateVersion
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.uris import substrate_uri
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import NonEmptyStr
from managed_tools.tools.substrate.line_diff import Diff, line_diff

SUBSTRATE = "/workspace/agent"
WORKSPACE = "/workspace"
MAX_FILE_BYTES = 1 << 20  # versions keep the full text in SQLite

SubstratePath = Annotated[
    NonEmptyStr,
    Field(max_length=4096, description="Under /workspace/agent, or relative to it."),
]
DraftPath = Annotated[
    NonEmptyStr,
    Field(max_length=4096, description="Under /workspace, or relative to it."),
]


# ---- paths and files ---------------------------------------------------------------------------------------


def resolve_substrate(ctx: ToolContext, path: str) -> Resolved:
    """A substrate file, through the one path guard, as a real file: a symlink inside the substrate would make a
    version describe one path while the write changed another, so links are refused (escaping ones already are)."""
    text = path.strip()
    resolved = ctx.runtime.guard.resolve(text if text.startswith("/") else f"{SUBSTRATE}/{text}", "read")
    if resolved.mount.kind != "agent_substrate":
        raise ToolError(f"{resolved.virtual} is not in the shared substrate; give a path under {SUBSTRATE}.")
    if not resolved.relative:
        raise ToolError(f"{SUBSTRATE} is the substrate itself; name a file in it.")
    if resolved.real != resolved.relative:
        raise ToolError(f"{resolved.virtual} is a symbolic link or lies under one; substrate files must be real files.")
    return resolved


def resolve_draft(ctx: ToolContext, path: str) -> Resolved:
    resolved = ctx.runtime.guard.resolve(path, "read")
    if resolved.mount.kind != "workspace":
        raise ToolError(
            f"{resolved.virtual} is not in the session workspace: drafts live under {WORKSPACE}, outside {SUBSTRATE}."
        )
    if not resolved.relative:
        raise ToolError(f"{WORKSPACE} is the workspace itself; name a file in it.")
    return resolved


def read_file(resolved: Resolved) -> bytes | None:
    """The file's bytes if it exists (UTF-8 text up to MAX_FILE_BYTES, else an error), None if it does not."""
    return read_text(resolved, MAX_FILE_BYTES) if resolved.exists else None


def read_any(resolved: Resolved) -> bytes | None:
    """An existing file about to be replaced, kept for the undo: any content, but bounded."""
    if not resolved.exists:
        return None
    data, more = read_limited(resolved, MAX_FILE_BYTES)
    if more:
        raise ToolError(f"{resolved.virtual} is larger than {MAX_FILE_BYTES} bytes; move it away or pick another path.")
    return data


def sha256_or_none(data: bytes | None) -> str | None:
    return None if data is None else sha256_hex(data)


def write_in_tx(
    ctx: ToolContext, resolved: Resolved, data: bytes, previous: bytes | None, version: SubstrateVersion | None = None
) -> None:
    """The last step of a handler: write the file and tie it to the transaction (undone if it rolls back); a
    substrate write (with its `version`) is also noted against a crash (stores/substrate.py `write_version`)."""
    if version is not None:
        substrate.write_version(ctx.runtime.db, ctx.tx, version, resolved, data, previous=previous)
    else:
        ctx.tx.on_rollback(replace_file(resolved, data, previous))
    if resolved.mount.kind == "agent_substrate":
        ctx.touched.add(substrate_uri(resolved.relative))


async def target_for(ctx: ToolContext, draft: Resolved, explicit: str | None) -> Resolved:
    """Where a draft goes: the given path, else the substrate file it was staged from, else the same path."""
    if explicit is not None:
        return resolve_substrate(ctx, explicit)
    entry = await substrate.staged_draft(ctx.tx, ctx.session_id, draft.virtual)
    return resolve_substrate(ctx, entry.source_path if entry is not None else draft.relative)


# ---- the line diff -------------------------------------------------------------------------------------------


async def diff_bytes(old: bytes | None, new: bytes, old_name: str, new_name: str, max_lines: int) -> Diff:
    # Up to a mebibyte a side: off the event loop, so other calls of this process keep moving.
    before = "" if old is None else old.decode("utf-8")
    return await anyio.to_thread.run_sync(line_diff, before, new.decode("utf-8"), old_name, new_name, max_lines)
