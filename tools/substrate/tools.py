"""Resources and the shared substrate (reference §2i, §5): stage → edit → compare → promote, with versions.

The substrate (`/workspace/agent`) is read-only to the file tools; it changes only through
`resources_promote_to_substrate` and `resources_restore_version`, both always_ask and outcome-gated. Drafts live
in the session workspace (`/workspace`). Substrate paths may be given relative to `/workspace/agent`, draft paths
relative to `/workspace`; results name both by their virtual paths.

A promotion re-checks its preconditions, records its version (with the full text) and writes the file inside
the call's `BEGIN IMMEDIATE` transaction; the write is the last step and registers its undo with the transaction,
so a failure anywhere before the commit puts the old bytes back while the write lock is still held. The file and
its version history therefore change together or not at all, across every process sharing the database.
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import anyio
from pydantic import Field

from managed_tools.stores import files, fsaccess, substrate
from managed_tools.stores.errors import StoreError
from managed_tools.stores.files import read_limited, read_text, replace_file, sha256_file
from managed_tools.stores.ids import sha256_hex
from managed_tools.stores.paths import Resolved
from managed_tools.stores.substrate import StagedDraft, SubstrateVersion
from managed_tools.tools.context import ToolContext
from managed_tools.tools.definition import ToolDefinition, ToolExample
from managed_tools.tools.environment.setup import MountedResource, mounted_resources
from managed_tools.tools.errors import ToolError
from managed_tools.tools.models import (
    Arguments,
    ExpectedContentHash,
    ExpectedVersionId,
    NextTool,
    NoArguments,
    NonEmptyStr,
    RequireOutcomePass,
    WireModel,
)
from managed_tools.tools.outcomes.gate import Evaluation, enforce_gate
from managed_tools.tools.substrate.line_diff import Diff, line_diff
from managed_tools.tools.uris import substrate_uri

SUBSTRATE = "/workspace/agent"
WORKSPACE = "/workspace"
MAX_FILE_BYTES = 1 << 20  # versions keep the full text in SQLite
CONSENT_DIFF_LINES = 40
MAX_LISTED_FILES = 200
PROMOTE = "resources_promote_to_substrate"
RESTORE = "resources_restore_version"

SubstratePath = Annotated[
    NonEmptyStr,
    Field(max_length=4096, description="A file of the shared substrate, relative to /workspace/agent or under it."),
]
DraftPath = Annotated[
    NonEmptyStr,
    Field(max_length=4096, description="A file in the session workspace, relative to /workspace or under it."),
]


# ---- paths and files ---------------------------------------------------------------------------------------


def _substrate_path(ctx: ToolContext, path: str) -> Resolved:
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


def _draft_path(ctx: ToolContext, path: str) -> Resolved:
    resolved = ctx.runtime.guard.resolve(path, "read")
    if resolved.mount.kind != "workspace":
        raise ToolError(
            f"{resolved.virtual} is not in the session workspace: drafts live under {WORKSPACE}, outside {SUBSTRATE}."
        )
    if not resolved.relative:
        raise ToolError(f"{WORKSPACE} is the workspace itself; name a file in it.")
    return resolved


def _read(resolved: Resolved) -> bytes | None:
    """The file's bytes if it exists (UTF-8 text up to MAX_FILE_BYTES, else an error), None if it does not."""
    return read_text(resolved, MAX_FILE_BYTES) if resolved.exists else None


def _read_any(resolved: Resolved) -> bytes | None:
    """An existing file about to be replaced, kept for the undo: any content, but bounded."""
    if not resolved.exists:
        return None
    data, more = read_limited(resolved, MAX_FILE_BYTES)
    if more:
        raise ToolError(f"{resolved.virtual} is larger than {MAX_FILE_BYTES} bytes; move it away or pick another path.")
    return data


def _hash(data: bytes | None) -> str | None:
    return None if data is None else sha256_hex(data)


def _replace(ctx: ToolContext, resolved: Resolved, data: bytes, previous: bytes | None) -> None:
    """The last step of a handler: write the file and tie it to the transaction (undone if it rolls back).

    Synchronous on purpose (at most a mebibyte): in a worker thread the write could finish after a cancellation
    had already unwound the handler, with no undo registered."""
    ctx.tx.on_rollback(replace_file(resolved, data, previous))
    if resolved.mount.kind == "agent_substrate":
        ctx.touched.add(substrate_uri(resolved.relative))


async def _target_for(ctx: ToolContext, draft: Resolved, explicit: str | None) -> Resolved:
    """Where a draft goes: the given path, else the substrate file it was staged from, else the same path."""
    if explicit is not None:
        return _substrate_path(ctx, explicit)
    entry = await substrate.staged_draft(ctx.tx, ctx.session_id, draft.virtual)
    return _substrate_path(ctx, entry.source_path if entry is not None else draft.relative)


# ---- the line diff -------------------------------------------------------------------------------------------


async def _diff(old: bytes | None, new: bytes, old_name: str, new_name: str, max_lines: int) -> Diff:
    # Up to a mebibyte a side: off the event loop, so other calls of this process keep moving.
    before = "" if old is None else old.decode("utf-8")
    return await anyio.to_thread.run_sync(line_diff, before, new.decode("utf-8"), old_name, new_name, max_lines)


# ---- resources_list ----------------------------------------------------------------------------------------


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
    source = _substrate_path(ctx, args.source_path)
    data = _read(source)
    if data is None:
        raise ToolError(f"{source.virtual} does not exist in the shared substrate; resources_list shows its files.")
    target = _draft_path(ctx, args.target_path or f"{WORKSPACE}/{source.relative}")
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
        draft = _read_any(target) or b""
        # The same source was staged here before: keep the draft (and its edits) rather than clobber it.
        return out.model_copy(
            update={
                "bytes": len(draft),
                "reused_existing": True,
                "diverged_from_source": sha256_hex(draft) != source_hash,
                "target_content_hash": sha256_hex(draft),
            }
        )
    previous = _read_any(target)
    await substrate.save_draft(
        ctx.tx, ctx.session_id, substrate.staged_now(target.virtual, source.virtual, source_hash, source_hash)
    )
    _replace(ctx, target, data, previous)
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
        resolved = _substrate_path(ctx, path) if substrate_side else _draft_path(ctx, path)
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
    max_preview_lines: Annotated[int, Field(ge=1, le=200, description="Lines of unified diff to show.")] = 12


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
    draft = _draft_path(ctx, args.session_path)
    content = _read(draft)
    if content is None:
        raise ToolError(f"{draft.virtual} does not exist; stage it first (resources_stage_from_substrate).")
    target = await _target_for(ctx, draft, args.substrate_path)
    live = _read(target)
    latest = await substrate.latest_version(ctx.tx, ctx.agent_id, target.virtual)
    diff = await _diff(live, content, target.virtual, draft.virtual, args.max_preview_lines)
    live_hash = _hash(live)
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
        preview_truncated=diff.total_lines > len(diff.lines),
        latest_version_id=precondition.expected_version_id,
        latest_version_created_at=None if latest is None else latest.created_at,
        latest_version_content_hash=None if latest is None else latest.content_hash,
        latest_version_wake_id=None if latest is None else latest.wake_id,
        promote_precondition=precondition,
        next_suggested_tool=step,
    )


# ---- promote and restore -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """A checked promotion or restore: what goes where, over what, and the gate's verdict."""

    source_path: str
    target: Resolved
    content: bytes
    live: bytes | None
    latest: SubstrateVersion | None
    evaluation: Evaluation | None


async def _checked(
    ctx: ToolContext,
    tool: str,
    target: Resolved,
    *,
    expected_version_id: str | None,
    expected_content_hash: str | None,
    require_outcome_pass: bool | None,
) -> tuple[bytes | None, SubstrateVersion | None, Evaluation | None]:
    """The reference's order: the target's version, then its live content, then the outcome gate."""
    live = _read(target)
    latest = await substrate.check_expectations(
        ctx.tx,
        tool=tool,
        agent_id=ctx.agent_id,
        target_path=target.virtual,
        live_hash=_hash(live),
        expected_version_id=expected_version_id,
        expected_content_hash=expected_content_hash,
    )
    return live, latest, await enforce_gate(ctx, tool, require_outcome_pass)


async def _apply(ctx: ToolContext, plan: _Plan, restored_from: str | None = None) -> SubstrateVersion:
    """Record the version, then write the file as the last step (undone if the transaction rolls back)."""
    version = await substrate.record_version(
        ctx.tx,
        agent_id=ctx.agent_id,
        session_id=ctx.session_id,
        wake_id=ctx.wake_id,
        source_path=plan.source_path,
        target_path=plan.target.virtual,
        content=plan.content.decode("utf-8"),
        restored_from_version_id=restored_from,
    )
    _replace(ctx, plan.target, plan.content, plan.live)
    return version


async def _consent_text(plan: _Plan, headline: str, new_name: str) -> str:
    size = "a new file" if plan.live is None else f"replaces {len(plan.live)} bytes"
    latest = "no version recorded yet" if plan.latest is None else f"latest version {plan.latest.id}"
    diff = await _diff(plan.live, plan.content, plan.target.virtual, new_name, CONSENT_DIFF_LINES)
    shown = "\n".join(diff.lines) or "(no line changes)"
    more = f"\n… {diff.total_lines - len(diff.lines)} more diff lines" if diff.total_lines > len(diff.lines) else ""
    return (
        f"{headline}\nTarget: {plan.target.virtual} ({size}; writes {len(plan.content)} bytes; {latest}). Every "
        f"session of this agent reads the substrate. +{diff.added} -{diff.removed} lines:\n{shown}{more}"
    )


class PromoteArgs(Arguments):
    source_path: DraftPath
    target_path: SubstratePath | None = Field(
        default=None, description="Default: the file the draft was staged from, else the same path."
    )
    overwrite: bool = Field(default=False, description="Replace an existing substrate file (history keeps it).")
    require_outcome_pass: RequireOutcomePass = None
    expected_version_id: ExpectedVersionId = None
    expected_content_hash: ExpectedContentHash = None


class PromoteOutput(WireModel):
    session_id: str
    source_path: str
    target_path: str
    uri: str
    bytes: int
    version_id: str
    previous_version_id: str | None
    content_hash: str
    outcome_evaluation: Evaluation | None


async def _plan_promotion(ctx: ToolContext, args: PromoteArgs) -> _Plan:
    draft = _draft_path(ctx, args.source_path)
    content = _read(draft)
    if content is None:
        raise ToolError(f"{draft.virtual} does not exist in the session workspace; nothing to promote.")
    target = await _target_for(ctx, draft, args.target_path)
    live, latest, evaluation = await _checked(
        ctx,
        PROMOTE,
        target,
        expected_version_id=args.expected_version_id,
        expected_content_hash=args.expected_content_hash,
        require_outcome_pass=args.require_outcome_pass,
    )
    if live is not None and not args.overwrite:
        raise ToolError(
            f"{target.virtual} already exists in the shared substrate; pass overwrite=true to replace it "
            "(its version history keeps what was there)."
        )
    return _Plan(draft.virtual, target, content, live, latest, evaluation)


async def _check_promotion(ctx: ToolContext, args: PromoteArgs) -> None:
    await _plan_promotion(ctx, args)


async def _promotion_preview(ctx: ToolContext, args: PromoteArgs) -> str:
    plan = await _plan_promotion(ctx, args)
    headline = f"Promote the draft {plan.source_path} into the agent's shared substrate."
    return await _consent_text(plan, headline, plan.source_path)


async def resources_promote_to_substrate(ctx: ToolContext, args: PromoteArgs) -> PromoteOutput:
    plan = await _plan_promotion(ctx, args)
    # The draft will match the substrate: reconcile the manifest so it lists as in_sync.
    digest = sha256_hex(plan.content)
    entry = await substrate.staged_draft(ctx.tx, ctx.session_id, plan.source_path)
    reconciled = substrate.staged_now(plan.source_path, plan.target.virtual, digest, digest)
    if entry is not None:
        reconciled = reconciled.model_copy(update={"staged_at": entry.staged_at})
    await substrate.save_draft(ctx.tx, ctx.session_id, reconciled)
    version = await _apply(ctx, plan)
    return PromoteOutput(
        session_id=ctx.session_id,
        source_path=plan.source_path,
        target_path=plan.target.virtual,
        uri=substrate_uri(plan.target.relative),
        bytes=version.size_bytes,
        version_id=version.id,
        previous_version_id=None if plan.latest is None else plan.latest.id,
        content_hash=version.content_hash,
        outcome_evaluation=plan.evaluation,
    )


class RestoreArgs(Arguments):
    version_id: NonEmptyStr
    require_outcome_pass: RequireOutcomePass = None
    expected_version_id: ExpectedVersionId = None
    expected_content_hash: ExpectedContentHash = None


class RestoreOutput(WireModel):
    session_id: str
    restored_from_version_id: str
    target_path: str
    uri: str
    bytes: int
    version_id: str
    previous_version_id: str | None
    content_hash: str
    outcome_evaluation: Evaluation | None


async def _plan_restore(ctx: ToolContext, args: RestoreArgs) -> _Plan:
    version, content = await substrate.read_version(ctx.tx, ctx.agent_id, args.version_id)
    target = _substrate_path(ctx, version.target_path)
    live, latest, evaluation = await _checked(
        ctx,
        RESTORE,
        target,
        expected_version_id=args.expected_version_id,
        expected_content_hash=args.expected_content_hash,
        require_outcome_pass=args.require_outcome_pass,
    )
    return _Plan(target.virtual, target, content.encode("utf-8"), live, latest, evaluation)


async def _check_restore(ctx: ToolContext, args: RestoreArgs) -> None:
    await _plan_restore(ctx, args)


async def _restore_preview(ctx: ToolContext, args: RestoreArgs) -> str:
    plan = await _plan_restore(ctx, args)
    headline = f"Restore {plan.target.virtual} to its version {args.version_id}."
    return await _consent_text(plan, headline, f"version {args.version_id}")


async def resources_restore_version(ctx: ToolContext, args: RestoreArgs) -> RestoreOutput:
    plan = await _plan_restore(ctx, args)
    version = await _apply(ctx, plan, restored_from=args.version_id)
    return RestoreOutput(
        session_id=ctx.session_id,
        restored_from_version_id=args.version_id,
        target_path=plan.target.virtual,
        uri=substrate_uri(plan.target.relative),
        bytes=version.size_bytes,
        version_id=version.id,
        previous_version_id=None if plan.latest is None else plan.latest.id,
        content_hash=version.content_hash,
        outcome_evaluation=plan.evaluation,
    )


# ---- versions ------------------------------------------------------------------------------------------------


class VersionView(WireModel):
    version_id: str
    agent_id: str
    session_id: str | None
    source_path: str
    target_path: str
    created_at: str
    content_hash: str
    size_bytes: int
    wake_id: str | None
    preview: str
    restored_from_version_id: str | None


def _view(version: SubstrateVersion) -> VersionView:
    return VersionView(version_id=version.id, **version.model_dump(exclude={"id"}))


class VersionsArgs(Arguments):
    target_path: SubstratePath
    limit: Annotated[int, Field(ge=1, le=100)] = 10


class VersionsOutput(WireModel):
    target_path: str
    count: int
    versions: list[VersionView]


async def resources_list_versions(ctx: ToolContext, args: VersionsArgs) -> VersionsOutput:
    target = _substrate_path(ctx, args.target_path)
    found = await substrate.list_versions(ctx.tx, ctx.agent_id, target.virtual, args.limit)
    return VersionsOutput(target_path=target.virtual, count=len(found), versions=[_view(v) for v in found])


class ReadVersionArgs(Arguments):
    version_id: NonEmptyStr
    max_chars: Annotated[int, Field(ge=1, le=200_000, description="Cut the content after this many characters.")] = (
        20_000
    )


class ReadVersionOutput(WireModel):
    version: VersionView
    content: str
    truncated: bool


async def resources_read_version(ctx: ToolContext, args: ReadVersionArgs) -> ReadVersionOutput:
    version, content = await substrate.read_version(ctx.tx, ctx.agent_id, args.version_id)
    return ReadVersionOutput(
        version=_view(version), content=content[: args.max_chars], truncated=len(content) > args.max_chars
    )


DEFINITIONS = (
    ToolDefinition(
        name="resources_list",
        title="List resources",
        description="List the mounted resources (workspace, the agent's shared substrate, vaults) and the "
        "substrate's files with their latest version.",
        input_model=NoArguments,
        output_model=ListOutput,
        handler=resources_list,
        effects=("resource_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="resources_stage_from_substrate",
        title="Stage a substrate file",
        description="Copy a shared substrate file into the session workspace as a draft to edit, then compare "
        "and promote it. An existing draft of the same file is reused.",
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
        description="Line diff of a draft against its substrate file, with the promotePrecondition "
        "(expectedVersionId, expectedContentHash) to pass to resources_promote_to_substrate.",
        input_model=CompareArgs,
        output_model=CompareOutput,
        handler=resources_compare_with_substrate,
        effects=("resource_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="resources_promote_to_substrate",
        title="Promote a draft to the substrate",
        description="Write a draft into the agent's shared substrate as a new version. A person approves each "
        "call; gated on a passing outcome; expectedVersionId/expectedContentHash refuse stale writes.",
        input_model=PromoteArgs,
        output_model=PromoteOutput,
        handler=resources_promote_to_substrate,
        read_only=False,
        permission_policy="always_ask",
        effects=("resource_read", "resource_write"),
        precondition=_check_promotion,
        consent_preview=_promotion_preview,
        examples=(
            ToolExample(
                description="Promote an edited draft over the current substrate file",
                input={
                    "sourcePath": "SOUL.md",
                    "overwrite": True,
                    "expectedVersionId": "0190f5a2-7c1e-7d3a-9b2f-4c5d6e7f8091",
                },
            ),
        ),
    ),
    ToolDefinition(
        name="resources_restore_version",
        title="Restore a substrate version",
        description="Write an earlier substrate version back as a new version. A person approves each call; "
        "gated on a passing outcome.",
        input_model=RestoreArgs,
        output_model=RestoreOutput,
        handler=resources_restore_version,
        read_only=False,
        permission_policy="always_ask",
        effects=("resource_read", "resource_write"),
        precondition=_check_restore,
        consent_preview=_restore_preview,
    ),
    ToolDefinition(
        name="resources_list_versions",
        title="List substrate versions",
        description="List the recorded versions of one substrate file, newest first.",
        input_model=VersionsArgs,
        output_model=VersionsOutput,
        handler=resources_list_versions,
        effects=("resource_read",),
    ),
    ToolDefinition(
        name="resources_read_version",
        title="Read a substrate version",
        description="Read one immutable substrate version, with its content, by its versionId.",
        input_model=ReadVersionArgs,
        output_model=ReadVersionOutput,
        handler=resources_read_version,
        effects=("resource_read",),
    ),
)
