"""Reading the substrate's history: `resources_list_versions` (one file's recorded versions, newest first) and
`resources_read_version` (one immutable version with its content).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from managed_tools.stores import substrate
from managed_tools.stores.provenance import Trust
from managed_tools.stores.substrate import SubstrateVersion
from managed_tools.tools.framework.context import provenance
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments, NonEmptyStr, WireModel
from managed_tools.tools.substrate.access import SubstratePath, resolve_substrate


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
    trust: Trust
    provenance: str


def _view(version: SubstrateVersion) -> VersionView:
    sources = version.provenance
    fields = version.model_dump(exclude={"id", "provenance"})
    return VersionView(version_id=version.id, **fields, trust=sources.trust, provenance=provenance.described(sources))


class VersionsArgs(Arguments):
    target_path: SubstratePath
    limit: Annotated[int, Field(ge=1, le=100)] = 10


class VersionsOutput(WireModel):
    target_path: str
    count: int
    versions: list[VersionView]


async def resources_list_versions(ctx: ToolContext, args: VersionsArgs) -> VersionsOutput:
    target = resolve_substrate(ctx, args.target_path)
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
