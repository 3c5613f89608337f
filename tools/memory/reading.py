"""Reading memory: the stores listed, one read, and its versions (listed, or one read by its id)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from managed_tools.stores import memory
from managed_tools.stores.memory import VersionRecord
from managed_tools.stores.provenance import Trust
from managed_tools.tools.framework.context import provenance
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import scoped_session_id
from managed_tools.tools.framework.context.uris import memory_uri
from managed_tools.tools.framework.wire.models import Arguments, NoArguments, NonEmptyStr, SessionId, WireModel
from managed_tools.tools.memory.targets import DEFAULT_READ_CHARS, STORES, Target, VersionedTarget, render, scope_of


class StoreView(WireModel):
    target: str
    title: str
    description: str
    scope: Literal["session", "agent"]
    writable: bool
    written_by: str | None
    searchable: bool
    format: Literal["markdown", "json"]


class ListOutput(WireModel):
    count: int
    stores: list[StoreView]


async def memory_list(ctx: ToolContext, _: NoArguments) -> ListOutput:
    views = [
        StoreView(
            target=name,
            title=info.title,
            description=info.description,
            scope=info.scope,
            writable=info.written_by is not None,
            written_by=info.written_by,
            searchable=True,
            format=info.format,
        )
        for name, info in STORES.items()
    ]
    return ListOutput(count=len(views), stores=views)


class ReadArgs(Arguments):
    target: Target
    session_id: SessionId | None = None
    max_chars: Annotated[int, Field(ge=1, le=200_000, description="Cut the content after this many characters.")] = (
        DEFAULT_READ_CHARS
    )


class ReadOutput(WireModel):
    target: str
    session_id: str
    format: Literal["markdown", "json"]
    content: str
    empty: bool
    char_count: int
    truncated: bool
    version_id: str | None
    content_hash: str | None
    uri: str
    trust: Trust | None = Field(description="untrusted: derived from an upstream result or another agent's output.")
    provenance: str | None


async def memory_read(ctx: ToolContext, args: ReadArgs) -> ReadOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    shown = await render(ctx, args.target, session_id)
    content = shown.content
    return ReadOutput(
        target=args.target,
        session_id=session_id,
        format=STORES[args.target].format,
        content=content[: args.max_chars],
        empty=not content.strip(),
        char_count=len(content),
        truncated=len(content) > args.max_chars,
        version_id=shown.version_id,
        content_hash=shown.content_hash,
        uri=memory_uri(args.target, session_id),
        trust=None if shown.provenance is None else shown.provenance.trust,
        provenance=None if shown.provenance is None else provenance.described(shown.provenance),
    )


# ---- versions ------------------------------------------------------------------------------------------


class VersionView(WireModel):
    version_id: str
    agent_id: str
    session_id: str | None
    target: str
    created_at: str
    source: str
    mode: str
    content_hash: str
    size_bytes: int
    wake_id: str | None
    preview: str
    trust: Trust
    provenance: str


def _version(record: VersionRecord) -> VersionView:
    sources = record.provenance
    fields = record.model_dump(exclude={"id", "provenance"})
    return VersionView(version_id=record.id, **fields, trust=sources.trust, provenance=provenance.described(sources))


class VersionsArgs(Arguments):
    target: VersionedTarget
    session_id: SessionId | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 10


class VersionsOutput(WireModel):
    target: str
    count: int
    versions: list[VersionView]


async def memory_list_versions(ctx: ToolContext, args: VersionsArgs) -> VersionsOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    found = await memory.list_versions(ctx.tx, scope_of(ctx, args.target, session_id), args.target, args.limit)
    return VersionsOutput(target=args.target, count=len(found), versions=[_version(v) for v in found])


class ReadVersionArgs(Arguments):
    target: VersionedTarget
    version_id: NonEmptyStr
    session_id: SessionId | None = None
    max_chars: Annotated[int, Field(ge=1, le=200_000)] = DEFAULT_READ_CHARS


class ReadVersionOutput(WireModel):
    version: VersionView
    content: str
    truncated: bool


async def memory_read_version(ctx: ToolContext, args: ReadVersionArgs) -> ReadVersionOutput:
    session_id = await scoped_session_id(ctx, args.session_id)
    record, content = await memory.read_version(
        ctx.tx, scope_of(ctx, args.target, session_id), args.target, args.version_id
    )
    return ReadVersionOutput(
        version=_version(record), content=content[: args.max_chars], truncated=len(content) > args.max_chars
    )
