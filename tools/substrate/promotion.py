"""The two writes into the substrate, `resources_promote_to_substrate` and `resources_restore_version`, both
always_ask and outcome-gated. Each re-checks its preconditions, records its version (with the full text) and writes
the file inside the call's `BEGIN IMMEDIATE` transaction; the write is the last step and registers its undo with the
transaction, so a failure anywhere before the commit puts the old bytes back while the write lock is still held. The
file and its version history therefore change together or not at all, across every process sharing the database.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from managed_tools.sandbox.paths import Resolved
from managed_tools.stores import substrate
from managed_tools.stores.ids import sha256_hex
from managed_tools.stores.provenance import Provenance, Source
from managed_tools.stores.substrate import SubstrateVersion
from managed_tools.tools.framework.context import provenance
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.uris import substrate_uri
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import (
    Arguments,
    ExpectedContentHash,
    ExpectedVersionId,
    NonEmptyStr,
    RequireOutcomePass,
    WireModel,
)
from managed_tools.tools.outcomes.gate import Evaluation, enforce_gate
from managed_tools.tools.substrate.access import (
    DraftPath,
    SubstratePath,
    diff_bytes,
    read_file,
    resolve_draft,
    resolve_substrate,
    sha256_or_none,
    target_for,
    write_in_tx,
)

CONSENT_DIFF_LINES = 40
PROMOTE = "resources_promote_to_substrate"
RESTORE = "resources_restore_version"


@dataclass(frozen=True)
class _Plan:
    """A checked promotion or restore: what goes where, over what, and the gate's verdict."""

    source_path: str
    target: Resolved
    content: bytes
    live: bytes | None
    latest: SubstrateVersion | None
    evaluation: Evaluation | None
    sources: Provenance


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
    live = read_file(target)
    latest = await substrate.check_expectations(
        ctx.tx,
        tool=tool,
        agent_id=ctx.agent_id,
        target_path=target.virtual,
        live_hash=sha256_or_none(live),
        expected_version_id=expected_version_id,
        expected_content_hash=expected_content_hash,
    )
    return live, latest, await enforce_gate(ctx, tool, require_outcome_pass)


async def _apply(ctx: ToolContext, plan: _Plan, restored_from: str | None = None) -> SubstrateVersion:
    """Record the version, then write the file as the last step (undone if the transaction rolls back, or at the
    next start-up if the process dies first)."""
    version = await substrate.record_version(
        ctx.tx,
        agent_id=ctx.agent_id,
        session_id=ctx.session_id,
        wake_id=ctx.wake_id,
        source_path=plan.source_path,
        target_path=plan.target.virtual,
        content=plan.content.decode("utf-8"),
        provenance=provenance.recorded(ctx, plan.sources),
        restored_from_version_id=restored_from,
    )
    write_in_tx(ctx, plan.target, plan.content, plan.live, version)
    return version


async def _consent_text(plan: _Plan, headline: str, new_name: str) -> str:
    size = "a new file" if plan.live is None else f"replaces {len(plan.live)} bytes"
    latest = "no version recorded yet" if plan.latest is None else f"latest version {plan.latest.id}"
    diff = await diff_bytes(plan.live, plan.content, plan.target.virtual, new_name, CONSENT_DIFF_LINES)
    shown = "\n".join(diff.lines) or "(no line changes)"
    more = f"\n… {diff.hidden} more diff lines" if diff.hidden else ""
    return (
        f"{headline}\nTarget: {plan.target.virtual} ({size}; writes {len(plan.content)} bytes; {latest}). Every "
        f"session of this agent reads the substrate. Provenance: {provenance.described(plan.sources)}. "
        f"+{diff.added} -{diff.removed} lines:\n{shown}{more}"
    )


class PromoteArgs(Arguments):
    source_path: DraftPath
    target_path: SubstratePath | None = Field(
        default=None, description="Default: the file the draft was staged from, else the same path."
    )
    overwrite: bool = Field(default=False, description="Replace an existing file (history keeps it).")
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
    draft = resolve_draft(ctx, args.source_path)
    content = read_file(draft)
    if content is None:
        raise ToolError(f"{draft.virtual} does not exist in the session workspace; nothing to promote.")
    target = await target_for(ctx, draft, args.target_path)
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
    draft_file = Source(kind="file", name=draft.virtual, trust="trusted")
    return _Plan(
        draft.virtual, target, content, live, latest, evaluation, await provenance.of_session(ctx, PROMOTE, draft_file)
    )


async def _check_promotion(ctx: ToolContext, args: PromoteArgs) -> None:
    await _plan_promotion(ctx, args)


async def _promotion_untrusted(ctx: ToolContext, args: PromoteArgs) -> str | None:
    return provenance.untrusted_reason((await _plan_promotion(ctx, args)).sources)


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
    target = resolve_substrate(ctx, version.target_path)
    live, latest, evaluation = await _checked(
        ctx,
        RESTORE,
        target,
        expected_version_id=args.expected_version_id,
        expected_content_hash=args.expected_content_hash,
        require_outcome_pass=args.require_outcome_pass,
    )
    # The restored content is the old version's: its sources, not this session's.
    sources = version.provenance.merged(Provenance(sources=(Source(kind="tool", name=RESTORE, trust="trusted"),)))
    return _Plan(target.virtual, target, content.encode("utf-8"), live, latest, evaluation, sources)


async def _check_restore(ctx: ToolContext, args: RestoreArgs) -> None:
    await _plan_restore(ctx, args)


async def _restore_untrusted(ctx: ToolContext, args: RestoreArgs) -> str | None:
    return provenance.untrusted_reason((await _plan_restore(ctx, args)).sources)


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


DEFINITIONS = (
    ToolDefinition(
        name="resources_promote_to_substrate",
        title="Promote a draft to the substrate",
        description="Write a draft into the agent's shared substrate as a new version. A person approves each "
        "call; gated on a passing outcome.",
        input_model=PromoteArgs,
        output_model=PromoteOutput,
        handler=resources_promote_to_substrate,
        read_only=False,
        permission_policy="always_ask",
        effects=("resource_read", "resource_write"),
        precondition=_check_promotion,
        asks_because=_promotion_untrusted,
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
        asks_because=_restore_untrusted,
        consent_preview=_restore_preview,
    ),
)
