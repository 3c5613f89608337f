"""memory_correct: a person corrects shared memory. A learning is superseded by a new one, forgotten or restored; the
agent's notes are superseded (new content), forgotten (an empty tombstone version) or restored (an older version's
content again). Each asks a person, showing exactly what changes; nothing is deleted (docs/memory-correct.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from managed_tools.stores import learnings, memory
from managed_tools.stores.memory import Mode
from managed_tools.tools.framework.context import provenance
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.uris import memory_uri
from managed_tools.tools.framework.wire.errors import Refused
from managed_tools.tools.framework.wire.models import Arguments, WireModel
from managed_tools.tools.memory.learning import LearningView, changeable, shown, view
from managed_tools.tools.memory.targets import MAX_CONTENT_CHARS

NOTES = "workspace_memory_notes"
SHOWN_CHARS = 600


class CorrectArgs(Arguments):
    action: Literal["supersede", "forget", "restore"]
    # Plain strings (an empty one is refused below as missing): the catalogue's budget counts every schema word.
    learning_id: str | None = None
    target: Literal["workspace_memory_notes"] | None = None
    title: Annotated[str, Field(max_length=120)] | None = None
    detail: Annotated[str, Field(max_length=400)] | None = None
    content: Annotated[str, Field(max_length=MAX_CONTENT_CHARS)] | None = None  # the notes' new content
    reason: Annotated[str, Field(max_length=400)] | None = None

    @model_validator(mode="after")
    def _one_thing(self) -> CorrectArgs:
        if (not self.learning_id) == (self.target is None):
            raise ValueError("name exactly one of learningId (a learning) or target (the agent's notes)")
        if self.action == "supersede":
            needed = ("title", "detail") if self.learning_id is not None else ("content",)
            if missing := [name for name in needed if not (getattr(self, name) or "").strip()]:
                raise ValueError(f"supersede needs {' and '.join(missing)}")
        return self


class ChangeView(WireModel):
    change_id: str
    action: learnings.Action
    replacement_id: str | None
    reason: str | None
    session_id: str | None
    created_at: str


class CorrectOutput(WireModel):
    action: str
    learning: LearningView | None  # the learning corrected, in its new state
    replacement_id: str | None  # supersede: the new learning
    history: list[ChangeView]  # the learning's changes, oldest first
    version_id: str | None  # the notes' new version (their versions keep every older one)


async def _notes_change(ctx: ToolContext, args: CorrectArgs) -> tuple[str, str, Mode, str]:
    """The notes now, what they become, the version's mode, and what a person is told about it."""
    current = await memory.read(ctx.tx, memory.agent_scope(ctx.agent_id), NOTES)
    if args.action == "supersede":
        assert args.content is not None  # the model's check
        return current.content, memory.combine("", args.content, "replace"), "replace", "replaces"
    if args.action == "forget":
        if not current.content:
            raise Refused("The notes are empty already; nothing to forget.")
        return current.content, "", "forget", "forgets (an empty version; the older ones stay listed)"
    older = await _restorable(ctx)
    return current.content, older, "restore", "restores an older version of"


async def _restorable(ctx: ToolContext) -> str:
    """The notes as they were before they were forgotten (another older version: memory_read_version, then
    supersede with its content)."""
    scope = memory.agent_scope(ctx.agent_id)
    versions = await memory.list_versions(ctx.tx, scope, NOTES, 100)
    if not versions or versions[0].mode != "forget":
        raise Refused("The notes are not forgotten; supersede them with an older version's content instead.")
    earlier = next((v for v in versions[1:] if v.mode != "forget"), None)
    if earlier is None:
        raise Refused("No version of the notes before they were forgotten is left to restore.")
    return (await memory.read_version(ctx.tx, scope, NOTES, earlier.id))[1]


async def correct_check(ctx: ToolContext, args: CorrectArgs) -> None:
    if args.learning_id is not None:
        await changeable(ctx, args.learning_id, args.action)
    else:
        await _notes_change(ctx, args)


async def correct_preview(ctx: ToolContext, args: CorrectArgs) -> str:
    if args.learning_id is None:
        before, after, _, verb = await _notes_change(ctx, args)
        return (
            f"This {verb} the notes shared by every session of agent {ctx.agent_id} ({len(before)} → {len(after)} "
            f"characters).\nNotes now begin:\n{before[:SHOWN_CHARS]}\nAfter, they begin:\n{after[:SHOWN_CHARS]}"
        )
    old = await learnings.get(ctx.tx, ctx.agent_id, args.learning_id)
    hidden = "it leaves workspace memory, search and learning_list (its history keeps it; restore brings it back)"
    said = {
        "forget": f"This forgets learning {old.id} of agent {ctx.agent_id}: {hidden}.\n    {shown(old)}",
        "restore": f"This restores {old.state} learning {old.id} of agent {ctx.agent_id} to workspace memory, "
        f"search and learning_list.\n    {shown(old)}",
        "supersede": f"This supersedes learning {old.id} of agent {ctx.agent_id}: {hidden}.\n    was: {shown(old)}"
        f"\n    now: [{old.kind}] {args.title} — {args.detail}",
    }
    return said[args.action] + (f"\nReason: {args.reason}" if args.reason else "")


async def memory_correct(ctx: ToolContext, args: CorrectArgs) -> CorrectOutput:
    # The precondition again, inside the write's transaction: the notes' change is worked out (or refused) there.
    if args.learning_id is None:
        return await _correct_notes(ctx, args)
    old = await changeable(ctx, args.learning_id, args.action)
    replacement = None
    if args.action == "supersede":
        assert args.title is not None and args.detail is not None  # the model's check
        replacement = await learnings.record(
            ctx.tx,
            agent_id=ctx.agent_id,
            session_id=ctx.session_id,
            kind=old.kind,
            title=args.title,
            detail=args.detail,
            promote=old.promote_to_memory,
            provenance=provenance.recorded(ctx, await provenance.of_session(ctx, "memory_correct")),
            supersedes=old.id,
            reason=args.reason,
        )
    else:
        await learnings.change(
            ctx.tx, ctx.agent_id, args.learning_id, args.action, session_id=ctx.session_id, reason=args.reason
        )
    ctx.touched.add(memory_uri("workspace_memory", ctx.session_id))
    return CorrectOutput(
        action=args.action,
        learning=view(await learnings.get(ctx.tx, ctx.agent_id, args.learning_id)),
        replacement_id=None if replacement is None else replacement.id,
        history=[
            ChangeView(change_id=c.id, **c.model_dump(exclude={"id", "learning_id", "agent_id"}))
            for c in await learnings.history(ctx.tx, args.learning_id)
        ],
        version_id=None,
    )


async def _correct_notes(ctx: ToolContext, args: CorrectArgs) -> CorrectOutput:
    _, after, mode, _ = await _notes_change(ctx, args)
    version, _, _ = await memory.write(
        ctx.tx,
        scope=memory.agent_scope(ctx.agent_id),
        target=NOTES,
        agent_id=ctx.agent_id,
        session_id=None,
        wake_id=ctx.wake_id,
        content=after,
        mode=mode,
        source="memory_correct",
        provenance=provenance.recorded(ctx, await provenance.of_session(ctx, "memory_correct")),
        searchable_title=memory.searchable_title(NOTES, None),
    )
    uri = memory_uri(NOTES, ctx.session_id)
    ctx.touched.update({uri, memory_uri("workspace_memory", ctx.session_id)})
    return CorrectOutput(action=args.action, learning=None, replacement_id=None, history=[], version_id=version.id)
