"""tools_search, tools_describe and tools_call: every served tool one search away (docs/tool-search.md).

The search profile lists a small core; these find the rest. tools_search ranks the served tools the caller may use
(tools/discovery/index.py); tools_describe gives their full schemas and, where the client hears
`tools/list_changed`, adds them to its list so they are called by their own names; tools_call runs one by name
where it does not. A tool the toolset selection leaves out is not in the registry, and one the caller's scopes
refuse is filtered out of every answer: neither is ever named, described or run. tools_call runs the tool through
the executor under its own name (its policy, approval, scopes and span events, beside tools_call's own), as
sandbox_execute does.
"""

from __future__ import annotations

import weakref
from typing import Annotated, Any

from pydantic import Field

from managed_tools.tools.discovery.index import ToolIndex
from managed_tools.tools.framework.calls import executor
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import PermissionPolicy, ToolDefinition, ToolExample
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, JsonObject, WireModel

SEARCH, DESCRIBE, CALL = "tools_search", "tools_describe", "tools_call"
OWN = (SEARCH, DESCRIBE, CALL)
MAX_LIMIT = 20
MAX_DESCRIBE = 10

_indexes: weakref.WeakKeyDictionary[Registry, tuple[int, ToolIndex]] = weakref.WeakKeyDictionary()


def index_of(registry: Registry) -> ToolIndex:
    """The registry's index, rebuilt when its tools change (an upstream server's came or went)."""
    kept = _indexes.get(registry)
    if kept is None or kept[0] != registry.version:
        kept = (registry.version, ToolIndex(d for d in registry if d.name not in OWN))
        _indexes[registry] = kept
    return kept[1]


def usable(ctx: ToolContext, name: str) -> ToolDefinition | None:
    """The served tool `name`, if this caller may use it (else as if it did not exist)."""
    definition = ctx.runtime.registry.get(name)
    if definition is None or (ctx.may_use is not None and not ctx.may_use(definition)):
        return None
    return definition


class SearchArgs(Arguments):
    query: Annotated[str, Field(min_length=1, max_length=500, description="What you want to do, in words.")]
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = 5


class Hit(WireModel):
    name: str
    title: str
    description: str
    score: float


class SearchOutput(WireModel):
    query: str
    hits: list[Hit]
    next: str


async def tools_search(ctx: ToolContext, args: SearchArgs) -> SearchOutput:
    ranked = index_of(ctx.runtime.registry).search(args.query, len(ctx.runtime.registry))
    hits = [
        Hit(name=d.name, title=d.title, description=d.description, score=score)
        for name, score in ranked
        if (d := usable(ctx, name)) is not None
    ][: args.limit]
    next_step = (
        f"{DESCRIBE} with the names you want gives their arguments; then call them."
        if hits
        else "No tool matched: try other words (what the tool does, not how)."
    )
    return SearchOutput(query=args.query, hits=hits, next=next_step)


class DescribeArgs(Arguments):
    names: Annotated[list[Annotated[str, Field(max_length=128)]], Field(min_length=1, max_length=MAX_DESCRIBE)]


class Described(WireModel):
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool
    permission_policy: PermissionPolicy


class DescribeOutput(WireModel):
    tools: list[Described]
    listed: bool  # added to this connection's tools/list (call them by name), else call through tools_call
    next: str


async def tools_describe(ctx: ToolContext, args: DescribeArgs) -> DescribeOutput:
    found, unknown = [], []
    for name in dict.fromkeys(args.names):
        definition = usable(ctx, name)
        if definition is None or name in OWN:
            unknown.append(name)
        else:
            found.append(definition)
    if unknown:
        near = {n for name in unknown for n in ctx.runtime.registry.near_names(name, visible=ctx.may_use)} - set(OWN)
        hint = f" Near names: {', '.join(sorted(near))}." if near else f" Find names with {SEARCH}."
        raise ToolError(f"No tool named {', '.join(unknown)} is served to you.{hint}")
    listed = await ctx.ports.reveal.reveal([d.name for d in found])
    return DescribeOutput(
        tools=[
            Described(
                name=d.name,
                title=d.title,
                description=d.description,
                input_schema=d.input_schema(),
                read_only=d.read_only,
                permission_policy=d.permission_policy,
            )
            for d in found
        ],
        listed=listed,
        next="They are now in your tool list: call them by name."
        if listed
        else f"Call them through {CALL} with {{name, arguments}}.",
    )


class CallArgs(Arguments):
    name: Annotated[str, Field(max_length=128, description="The tool's name (from tools_search).")]
    arguments: JsonObject = Field(default_factory=dict, description="Its arguments as JSON (see tools_describe).")


class CallOutput(WireModel):
    name: str
    output: dict[str, Any]


async def tools_call(ctx: ToolContext, args: CallArgs) -> CallOutput:
    definition = usable(ctx, args.name)
    if definition is None or args.name in OWN:
        why = "call it directly" if args.name in OWN else f"find served tools with {SEARCH}"
        raise ToolError(f"No tool named {args.name!r} can be called through {CALL}: {why}.")
    result = await executor.execute_routed(ctx, definition, args.arguments)
    if result.is_error or result.structured is None:
        raise executor.Routed(result)
    return CallOutput(name=args.name, output=result.structured)


DEFINITIONS = (
    ToolDefinition(
        name=SEARCH,
        title="Search the tools",
        description="Find tools by what you want to do: the best matches of every tool this server serves you, "
        "most of them not listed until you ask. Then tools_describe.",
        input_model=SearchArgs,
        output_model=SearchOutput,
        handler=tools_search,
        idempotent=True,
        examples=(ToolExample(description="A file search", input={"query": "search file contents"}),),
    ),
    ToolDefinition(
        name=DESCRIBE,
        title="Describe tools",
        description="Full schemas of tools by name; lists them for you to call by name where your client "
        "follows list changes, else call them with tools_call.",
        input_model=DescribeArgs,
        output_model=DescribeOutput,
        handler=tools_describe,
        idempotent=True,
    ),
    ToolDefinition(
        name=CALL,
        title="Call a found tool",
        description="Call a served tool by name with its arguments, under its own policy and approval.",
        input_model=CallArgs,
        output_model=CallOutput,
        handler=tools_call,
        read_only=False,
        effects=("resource_read", "resource_write", "sandbox_execute"),
        # The routed call records its own arguments, with what its tool hides left out.
        hidden_args=("arguments",),
        own_transactions=True,
    ),
)
