"""`skills_list`, `skills_search`, `skills_read`: each call reads the skill directories again (they are small),
so a skill added or changed on disk is seen at once, notifications or not."""

from __future__ import annotations

from typing import Annotated

import anyio
from pydantic import Field

from managed_tools.stores.skills import Skill
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.retrieval import build_query, score_text
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, NextTool, NonEmptyStr, WireModel

DEFAULT_MAX_CHARS = 24_000


class SkillView(WireModel):
    name: str
    description: str
    preview: str
    source: str = Field(description="Which directory it came from: workspace-agents, workspace-claude, "
                        "agent-substrate, user, config or skills-dir.")  # fmt: skip
    sha256: str = Field(description="sha256 of the SKILL.md file; also its resource skill://<name>/SKILL.md.")
    next_step: NextTool


def _view(skill: Skill) -> SkillView:
    return SkillView(
        name=skill.name,
        description=skill.description,
        preview=skill.preview,
        source=skill.source,
        sha256=skill.sha256,
        next_step=NextTool(tool="skills_read", args={"name": skill.name}, rationale="Read the skill's instructions."),
    )


async def _current(ctx: ToolContext) -> list[Skill]:
    await anyio.to_thread.run_sync(ctx.runtime.skills.reload)
    return ctx.runtime.skills.all()


class NoArgs(Arguments):
    pass


class ListOutput(WireModel):
    count: int
    skills: list[SkillView]


async def skills_list(ctx: ToolContext, args: NoArgs) -> ListOutput:
    found = [_view(s) for s in await _current(ctx)]
    return ListOutput(count=len(found), skills=found)


class SearchArgs(Arguments):
    query: Annotated[NonEmptyStr, Field(max_length=1000, description='Words; "quoted phrases" exact.')]
    limit: Annotated[int, Field(ge=1, le=50)] = 8


class SearchHit(SkillView):
    file_path: str
    base_dir: str
    score: int
    reasons: list[str]


class SearchOutput(WireModel):
    count: int
    hits: list[SearchHit]


async def skills_search(ctx: ToolContext, args: SearchArgs) -> SearchOutput:
    """Scored over `name\\ndescription\\nsource` as the reference does; ties broken by name."""
    query = build_query(args.query)
    hits = []
    for skill in await _current(ctx):
        score, reasons = score_text(f"{skill.name}\n{skill.description}\n{skill.source}", query)
        if score > 0:
            hit = SearchHit(**_view(skill).model_dump(), file_path=skill.file_path, base_dir=skill.base_dir,
                            score=score, reasons=reasons)  # fmt: skip
            hits.append(hit)
    hits.sort(key=lambda h: (-h.score, h.name))
    return SearchOutput(count=len(hits[: args.limit]), hits=hits[: args.limit])


class ReadArgs(Arguments):
    name: Annotated[NonEmptyStr, Field(max_length=80, description="The skill's exact name.")]
    max_chars: Annotated[int, Field(ge=1, le=200_000)] = DEFAULT_MAX_CHARS


class ReadOutput(WireModel):
    name: str
    description: str
    preview: str
    source: str
    file_path: str
    base_dir: str
    sha256: str
    content: str = Field(description="The whole file, frontmatter included, cut at maxChars.")
    truncated: bool


async def skills_read(ctx: ToolContext, args: ReadArgs) -> ReadOutput:
    await _current(ctx)
    skill = ctx.runtime.skills.get(args.name)
    if skill is None:
        known = ", ".join(s.name for s in ctx.runtime.skills.all()[:20]) or "none"
        raise ToolError(f"Unknown skill: {args.name}. Known skills: {known}.")
    return ReadOutput(
        name=skill.name,
        description=skill.description,
        preview=skill.preview,
        source=skill.source,
        file_path=skill.file_path,
        base_dir=skill.base_dir,
        sha256=skill.sha256,
        content=skill.content[: args.max_chars],
        truncated=len(skill.content) > args.max_chars,
    )


DEFINITIONS = (
    ToolDefinition(
        name="skills_list",
        title="List skills",
        description="The skills available to this agent (SKILL.md instructions): name, description, preview and "
        "where each comes from.",
        input_model=NoArgs,
        output_model=ListOutput,
        handler=skills_list,
        effects=("skill_read",),
        examples=(ToolExample(description="Every skill", input={}),),
    ),
    ToolDefinition(
        name="skills_search",
        title="Search skills",
        description="Find skills whose name, description or source match the query, best first, each with why.",
        input_model=SearchArgs,
        output_model=SearchOutput,
        handler=skills_search,
        effects=("skill_read",),
        examples=(ToolExample(description="Skills about releases", input={"query": "release notes", "limit": 3}),),
    ),
    ToolDefinition(
        name="skills_read",
        title="Read a skill",
        description="The whole SKILL.md of one skill by exact name (frontmatter included), cut at maxChars.",
        input_model=ReadArgs,
        output_model=ReadOutput,
        handler=skills_read,
        effects=("skill_read",),
        examples=(ToolExample(description="One skill", input={"name": "release-notes"}),),
    ),
)
