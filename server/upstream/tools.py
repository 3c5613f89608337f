"""An upstream's tools as our definitions (ownership `mcp`, its schemas verbatim), its results as our output."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from pydantic import ValidationError

from managed_tools.tools.content import AudioBlock, Block, ImageBlock, ResourceBlock, TextBlock
from managed_tools.tools.context import ToolContext
from managed_tools.tools.custom import schema_model
from managed_tools.tools.definition import PermissionPolicy, ToolDefinition
from managed_tools.tools.errors import RegistryError, ToolError
from managed_tools.tools.models import Arguments, WireModel
from managed_tools.tools.registry import GROUP_SEPARATOR, MAX_UPSTREAM_DESCRIPTION_CHARS, UPSTREAM_NAME_PATTERN

log = logging.getLogger("managed_tools.upstream")
MAX_TEXT_CHARS = 100_000  # what one result may put into the conversation as text
MAX_BLOCK_BYTES = 8 << 20  # one image, audio clip or embedded resource, base64 as on the wire
MAX_BLOCKS = 32
MAX_ERROR_CHARS = 2000

Call = Callable[[str, dict[str, Any], float], Awaitable[types.CallToolResult]]  # tool, arguments, seconds left


class UpstreamText(WireModel):
    """What an upstream tool without an output schema returned: its text (its images follow as content)."""

    text: str


def published_name(upstream: str, tool: str) -> str:
    return f"{upstream}{GROUP_SEPARATOR}{tool}"


def definitions(
    upstream: str, tools: list[types.Tool], call: Call, policy: Mapping[str, PermissionPolicy]
) -> list[ToolDefinition]:
    """The tools we can publish; one we cannot (a name no client accepts, a schema that is not JSON Schema)
    is left out with a warning rather than taking the others down."""
    found: list[ToolDefinition] = []
    for tool in tools:
        try:
            found.append(_definition(upstream, tool, call, policy))
        except (RegistryError, ValueError) as exc:
            log.warning("upstream %s: tool %r is not published: %s", upstream, tool.name[:80], exc)
    return found


def _definition(upstream: str, tool: types.Tool, call: Call, policy: Mapping[str, PermissionPolicy]) -> ToolDefinition:
    name = published_name(upstream, tool.name)
    if not UPSTREAM_NAME_PATTERN.fullmatch(name):
        raise RegistryError(f"its published name would not match {UPSTREAM_NAME_PATTERN.pattern}")
    hints = tool.annotations or types.ToolAnnotations()
    read_only = hints.read_only_hint is True
    ident = "".join(part.capitalize() for part in name.replace("-", "_").split("_"))
    output_model: type[WireModel] = (
        UpstreamText if tool.output_schema is None else schema_model(f"{ident}Output", tool.output_schema, WireModel)
    )
    description = (tool.description or "").strip() or f"The tool {tool.name} of the upstream MCP server {upstream}."

    async def handler(ctx: ToolContext, args: Arguments) -> WireModel:
        left = ctx.deadline - anyio.current_time()
        result = await call(tool.name, args.model_dump(mode="json", by_alias=True), left)
        text, blocks = _content(result.content)
        if result.is_error:
            raise ToolError(f"upstream '{upstream}' reported an error from {tool.name}: {_clip(text, MAX_ERROR_CHARS)}")
        ctx.attachments.extend(blocks)
        if tool.output_schema is None:
            return UpstreamText(text=text)
        try:
            return output_model.model_validate(result.structured_content or {})
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            raise ToolError(f"upstream '{upstream}' answered {tool.name} outside its output schema: {first}") from None

    return ToolDefinition(
        name=name,
        title=tool.title or hints.title or tool.name,
        description=description
        if len(description) <= MAX_UPSTREAM_DESCRIPTION_CHARS
        else description[: MAX_UPSTREAM_DESCRIPTION_CHARS - 1] + "…",
        input_model=schema_model(f"{ident}Input", tool.input_schema, Arguments),
        output_model=output_model,
        handler=handler,
        render=_render if tool.output_schema is None else None,
        ownership="mcp",
        permission_policy=policy.get(name, "always_allow" if read_only else "always_ask"),
        read_only=read_only,
        # MCP's defaults: a tool that is not read-only may destroy, and reaches beyond its server.
        destructive=not read_only and hints.destructive_hint is not False,
        idempotent=hints.idempotent_hint is True,
        open_world=hints.open_world_hint is not False,
        interrupt_behavior="cancel",
        own_transactions=True,  # it waits on another process; no transaction of ours is held meanwhile
    )


def _render(output: Any) -> list[Block]:
    assert isinstance(output, UpstreamText)
    return [TextBlock(text=output.text)]


def _content(content: list[types.ContentBlock]) -> tuple[str, list[Block]]:
    """The text of every text block (bounded), and the other blocks as ours (each bounded, at most MAX_BLOCKS)."""
    texts: list[str] = []
    blocks: list[Block] = []
    for block in content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ResourceLink):
            texts.append(f"(resource link: {block.uri})")
        elif len(blocks) >= MAX_BLOCKS:
            texts.append(f"(a {block.type} block left out: at most {MAX_BLOCKS} per result)")
        elif (converted := _block(block)) is None:
            texts.append(f"(a {block.type} block left out: over {MAX_BLOCK_BYTES >> 20} MiB)")
        else:
            blocks.append(converted)
    return _clip("\n".join(texts), MAX_TEXT_CHARS), blocks


def _block(block: types.ContentBlock) -> Block | None:
    if isinstance(block, types.ImageContent):
        found: Block = ImageBlock(data=block.data, mime_type=block.mime_type)
        size = len(block.data)
    elif isinstance(block, types.AudioContent):
        found, size = AudioBlock(data=block.data, mime_type=block.mime_type), len(block.data)
    elif isinstance(block, types.EmbeddedResource):
        inner = block.resource
        body = inner.text if isinstance(inner, types.TextResourceContents) else inner.blob
        size = len(body)
        found = (
            ResourceBlock(uri=inner.uri, mime_type=inner.mime_type, text=inner.text)
            if isinstance(inner, types.TextResourceContents)
            else ResourceBlock(uri=inner.uri, mime_type=inner.mime_type, blob=inner.blob)
        )
    else:
        return None
    return found if size <= MAX_BLOCK_BYTES else None


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit} more characters cut)"
