"""An upstream's tools as our definitions (ownership `mcp`, its schemas verbatim), its results as our output."""

from __future__ import annotations

import base64
import binascii
import mimetypes
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from pydantic import ValidationError

from managed_tools.server.upstream.log_repeats import limited
from managed_tools.stores.attachments import AttachmentError
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.custom import schema_model
from managed_tools.tools.framework.definitions.definition import PermissionPolicy, Ready, ToolDefinition
from managed_tools.tools.framework.definitions.registry import (
    GROUP_SEPARATOR,
    MAX_UPSTREAM_DESCRIPTION_CHARS,
    UPSTREAM_NAME_PATTERN,
)
from managed_tools.tools.framework.wire.content import Block, TextBlock
from managed_tools.tools.framework.wire.errors import RegistryError, ToolError
from managed_tools.tools.framework.wire.models import Arguments, WireModel

log = limited("managed_tools.upstream")
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
    upstream: str,
    tools: list[types.Tool],
    call: Call,
    policy: Mapping[str, PermissionPolicy],
    ready: Ready | None = None,
) -> list[ToolDefinition]:
    """The tools we can publish; one we cannot (a name no client accepts, a schema that is not JSON Schema)
    is left out with a warning rather than taking the others down."""
    found: list[ToolDefinition] = []
    for tool in tools:
        try:
            found.append(_definition(upstream, tool, call, policy, ready))
        except (RegistryError, ValueError) as exc:
            log.warning("upstream %s: tool %r is not published: %s", upstream, tool.name[:80], exc)
    return found


def _definition(
    upstream: str, tool: types.Tool, call: Call, policy: Mapping[str, PermissionPolicy], ready: Ready | None
) -> ToolDefinition:
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
        text, files = _content(result.content)
        if result.is_error:
            raise ToolError(f"upstream '{upstream}' reported an error from {tool.name}: {_clip(text, MAX_ERROR_CHARS)}")
        notes = [await _attach(ctx, tool.name, number, file) for number, file in enumerate(files, 1)]
        text = "\n".join([text, *filter(None, notes)]) if any(notes) else text
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
        ready=ready,  # a call waits for the server to be up before anyone is asked to approve it
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


async def _attach(ctx: ToolContext, tool: str, number: int, file: _File) -> str | None:
    """Store an upstream's image, audio or binary resource as an attachment of the session, as our own tools'
    files are (image content and a resource link); None, or a note saying why it was left out."""
    name = f"{tool}-{number}{mimetypes.guess_extension(file.mime_type) or '.bin'}"
    try:
        await ctx.attach(file.data, name=name, mime_type=file.mime_type)
    except AttachmentError as exc:
        log.warning("upstream result %s of %s not kept: %s", number, tool, exc)
        return f"(a {file.kind} block left out: {exc})"
    return None


@dataclass(frozen=True)
class _File:
    kind: str
    data: bytes
    mime_type: str


def _content(content: list[types.ContentBlock]) -> tuple[str, list[_File]]:
    """The text of every text block and text resource (bounded), and the images, audio and binary resources
    as files to attach (each bounded, at most MAX_BLOCKS)."""
    texts: list[str] = []
    blocks: list[_File] = []
    for block in content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ResourceLink):
            texts.append(f"(resource link: {block.uri})")
        elif len(blocks) >= MAX_BLOCKS:
            texts.append(f"(a {block.type} block left out: at most {MAX_BLOCKS} per result)")
        elif (converted := _block(block)) is None:
            texts.append(f"(a {block.type} block left out: over {MAX_BLOCK_BYTES >> 20} MiB)")
        elif isinstance(converted, str):
            texts.append(converted)
        else:
            blocks.append(converted)
    return _clip("\n".join(texts), MAX_TEXT_CHARS), blocks


def _block(block: types.ContentBlock) -> _File | str | None:
    """A block as a file to attach, a text resource as its text, or None when it is too big or unknown."""
    if isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.TextResourceContents):
        inner = block.resource
        return f"(resource {inner.uri})\n{inner.text}" if len(inner.text) <= MAX_BLOCK_BYTES else None
    kind: str
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind, encoded, mime_type = block.type, block.data, block.mime_type
    elif isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.BlobResourceContents):
        kind, encoded = "resource", block.resource.blob
        mime_type = block.resource.mime_type or "application/octet-stream"
    else:
        return None
    if len(encoded) > MAX_BLOCK_BYTES:
        return None
    try:
        return _File(kind, base64.b64decode(encoded, validate=True), mime_type)
    except binascii.Error:
        return f"(a {kind} block left out: not valid base64)"


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit} more characters cut)"
