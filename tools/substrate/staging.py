"""The draft side of the substrate: `resources_stage_from_substrate` copies a substrate file into the session
workspace as a draft (reusing one staged from the same file), `resources_list_staged_drafts` reports each draft's
status, and `resources_compare_with_substrate` diffs a draft against its substrate file and hands back the
promotion's preconditions.
"""

from __future__ import annotations

import stat
from typing import Annotated, Literal

import anyio
from pydantic import Field

from managed_tools.sandbox import files
from managed_tools.sandbox.files import sha256_file
from managed_tools.stores import substrate
from managed_tools.stores.errors import StoreError
from managed_tools.stores.ids import sha256_hex
from managed_tools.stores.substrate import StagedDraft
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, NextTool, WireModel
from managed_tools.tools.substrate.access import (
    WORKSPACE,
    DraftPath,
    SubstratePath,
    diff_bytes,
    read_any,
    read_file,
    resolve_draft,
    resolve_substrate,
    sha256_or_none,
    target_for,
    write_in_tx,
)
from managed_tools.tools.substrate.promotion import PROMOTE

# ---- staging -------------------------------------------------------------------------------------------------


class StageArgs(Arguments):
    source_path: SubstratePath
    target_path: DraftPath | None = Field(default=None, description="Where the draft goes; default: the same path.")
    overwrite: bool = Field(default=False, description="Replace a file that is already at targetPath.")


class StageOutput(WireModel):
    session_id: str
    source_path: str
    target_path: str
    bytes: int
    reused_existing: bool
    diverged_from_source: bool
    source_content_hash: str
    target_content_hash: str


async def resources_stage_from_substrate(ctx: ToolContext, args: StageArgs) -> StageOutput:
    source = resolve_substrate(ctx, args.source_path)
    data = read_file(source)
    if data is None:
        raise ToolError(f"{source.virtual} does not exist in the shared substrate; resources_list shows its files.")
    target = resolve_draft(ctx, args.target_path or f"{WORKSPACE}/{source.relative}")
    source_hash = sha256_hex(data)
    out = StageOutput(
        session_id=ctx.session_id,
        source_path=source.virtual,
        target_path=target.virtual,
        bytes=len(data),
        reused_existing=False,
        diverged_from_source=False,
        source_content_hash=source_hash,
        target_content_hash=source_hash,
    )
    entry = await substrate.staged_draft(ctx.tx, ctx.session_id, target.virtual)
    if target.exists and not args.overwrite:
        if entry is None or entry.source_path != source.virtual:
            raise ToolError(
                f"{target.virtual} already exists in the session workspace; pass overwrite=true to replace it, "
                "or choose another targetPath."
            )
        draft = read_any(target) or b""
        # The same source was staged here before: keep the draft (and its edits) rather than clobber it.
        return out.model_copy(
            update={
                "bytes": len(draft),
                "reused_existing": True,
                "diverged_from_source": sha256_hex(draft) != source_hash,
                "target_content_hash": sha256_hex(draft),
            }
        )
    previous = read_any(target)
    await substrate.save_draft(
        ctx.tx, ctx.session_id, substrate.staged_now(target.virtual, source.virtual, source_hash, source_hash)
    )
    write_in_tx(ctx, target, data, previous)
    return out


class DraftsArgs(Arguments):
    limit: Annotated[int, Field(ge=1, le=200, description="At most this many drafts, most recently staged first.")] = 50


DraftStatus = Literal["ready", "in_sync", "draft_missing", "substrate_missing"]


class DraftView(WireModel):
    session_path: str
    substrate_path: str
    staged_at: str
    draft_exists: bool
    substrate_exists: bool
    draft_content_hash: str | None
    substrate_content_hash: str | None
    source_changed_since_stage: bool
    draft_changed_since_stage: bool
    status: DraftStatus
    problem: str | None


class DraftsOutput(WireModel):
    session_id: str
    count: int
    drafts: list[DraftView]


def _current_hash(ctx: ToolContext, path: str, substrate_side: bool) -> tuple[str | None, str | None]:
    """(sha256 of the file or None if it is missing, why it cannot be reached if so)."""
    try:
        resolved = resolve_substrate(ctx, path) if substrate_side else resolve_draft(ctx, path)
        info = files.lstat(resolved)
        digest = sha256_file(resolved) if info is not None and stat.S_ISREG(info.st_mode) else None
    except (ToolError, StoreError) as exc:
        return None, str(exc)
    return digest, None


def _draft_view(ctx: ToolContext, entry: StagedDraft) -> DraftView:
    draft_hash, draft_problem = _current_hash(ctx, entry.session_path, substrate_side=False)
    source_hash, source_problem = _current_hash(ctx, entry.source_path, substrate_side=True)
    status: DraftStatus
    if draft_hash is None:
        status = "draft_missing"
    elif source_hash is None:
        status = "substrate_missing"
    else:
        status = "in_sync" if draft_hash == source_hash else "ready"
    return DraftView(
        session_path=entry.session_path,
        substrate_path=entry.source_path,
        staged_at=entry.staged_at,
        draft_exists=draft_hash is not None,
        substrate_exists=source_hash is not None,
        draft_content_hash=draft_hash,
        substrate_content_hash=source_hash,
        source_changed_since_stage=source_hash != entry.source_content_hash,
        draft_changed_since_stage=draft_hash != entry.target_content_hash,
        status=status,
        problem=draft_problem or source_problem,
    )


async def resources_list_staged_drafts(ctx: ToolContext, args: DraftsArgs) -> DraftsOutput:
    total, entries = await substrate.staged_drafts(ctx.tx, ctx.session_id, args.limit)
    views = await anyio.to_thread.run_sync(lambda: [_draft_view(ctx, entry) for entry in entries])
    return DraftsOutput(session_id=ctx.session_id, count=total, drafts=views)


# ---- compare -------------------------------------------------------------------------------------------------


class CompareArgs(Arguments):
    session_path: DraftPath
    substrate_path: SubstratePath | None = Field(
        default=None, description="Default: the file the draft was staged from, else the same path."
    )
    max_preview_lines: Annotated[int, Field(ge=1, le=200, description="Diff lines to show (headers come on top).")] = 12


class PromotePrecondition(WireModel):
    expected_version_id: str | None
    expected_content_hash: str | None
    version_available: bool
    content_hash_available: bool


class CompareOutput(WireModel):
    session_path: str
    substrate_path: str
    substrate_exists: bool
    identical: bool
    session_char_count: int
    substrate_char_count: int
    session_content_hash: str
    substrate_content_hash: str | None
    differing_line_count: int
    added_line_count: int
    removed_line_count: int
    preview: list[str]
    preview_truncated: bool
    latest_version_id: str | None
    latest_version_created_at: str | None
    latest_version_content_hash: str | None
    latest_version_wake_id: str | None
    promote_precondition: PromotePrecondition
    next_suggested_tool: NextTool | None


async def resources_compare_with_substrate(ctx: ToolContext, args: CompareArgs) -> CompareOutput:
    draft = resolve_draft(ctx, args.session_path)
    content = read_file(draft)
    if content is None:
        raise ToolError(f"{draft.virtual} does not exist; stage it first (resources_stage_from_substrate).")
    target = await target_for(ctx, draft, args.substrate_path)
    live = read_file(target)
    latest = await substrate.latest_version(ctx.tx, ctx.agent_id, target.virtual)
    diff = await diff_bytes(live, content, target.virtual, draft.virtual, args.max_preview_lines)
    live_hash = sha256_or_none(live)
    identical = live_hash == sha256_hex(content)
    precondition = PromotePrecondition(
        expected_version_id=None if latest is None else latest.id,
        expected_content_hash=live_hash,
        version_available=latest is not None,
        content_hash_available=live_hash is not None,
    )
    step = None
    if not identical:
        promote_args: dict[str, object] = {
            "sourcePath": draft.virtual,
            "targetPath": target.virtual,
            "overwrite": live is not None,
            "expectedVersionId": precondition.expected_version_id,
            "expectedContentHash": precondition.expected_content_hash,
        }
        step = NextTool(
            tool=PROMOTE,
            args={k: v for k, v in promote_args.items() if v is not None},
            rationale="Promote the draft; the expectations refuse it if the substrate changes before then.",
        )
    return CompareOutput(
        session_path=draft.virtual,
        substrate_path=target.virtual,
        substrate_exists=live is not None,
        identical=identical,
        session_char_count=len(content.decode("utf-8")),
        substrate_char_count=0 if live is None else len(live.decode("utf-8")),
        session_content_hash=sha256_hex(content),
        substrate_content_hash=live_hash,
        differing_line_count=diff.differing,
        added_line_count=diff.added,
        removed_line_count=diff.removed,
        preview=diff.lines,
        preview_truncated=diff.hidden > 0,
        latest_version_id=precondition.expected_version_id,
        latest_version_created_at=None if latest is None else latest.created_at,
        latest_version_content_hash=None if latest is None else latest.content_hash,
        latest_version_wake_id=None if latest is None else latest.wake_id,
        promote_precondition=precondition,
        next_suggested_tool=step,
    )


DEFINITIONS = (
    ToolDefinition(
        name="resources_stage_from_substrate",
        title="Stage a substrate file",
        description="Copy a substrate file into the session workspace as a draft to edit, compare and promote; "
        "an existing draft of it is reused.",
        input_model=StageArgs,
        output_model=StageOutput,
        handler=resources_stage_from_substrate,
        read_only=False,
        effects=("resource_read", "resource_write"),
        examples=(ToolExample(description="Stage SOUL.md to /workspace/SOUL.md", input={"sourcePath": "SOUL.md"}),),
    ),
    ToolDefinition(
        name="resources_list_staged_drafts",
        title="List staged drafts",
        description="List this session's staged drafts with their status: ready, in_sync, draft_missing or "
        "substrate_missing.",
        input_model=DraftsArgs,
        output_model=DraftsOutput,
        handler=resources_list_staged_drafts,
        effects=("resource_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="resources_compare_with_substrate",
        title="Compare a draft with the substrate",
        description="Line diff of a draft against its substrate file, with the promotePrecondition to pass to "
        "resources_promote_to_substrate.",
        input_model=CompareArgs,
        output_model=CompareOutput,
        handler=resources_compare_with_substrate,
        effects=("resource_read",),
        idempotent=True,
    ),
)
