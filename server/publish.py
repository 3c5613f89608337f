"""Turning a ToolDefinition into an MCP Tool, and a CallResult into a CallToolResult."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from managed_tools.tools.framework.content import (
    AudioBlock,
    Block,
    ImageBlock,
    ResourceBlock,
    ResourceLinkBlock,
    TextBlock,
)
from managed_tools.tools.framework.definition import ToolDefinition
from managed_tools.tools.framework.executor import CallResult
from managed_tools.tools.framework.latent import SUBMIT_TOOL

TOOL_META_KEY = "managed-tools/tool"
ERROR_META_KEY = "managed-tools/error"
ACTION_META_KEY = "managed-tools/requiresAction"


def tool_meta(definition: ToolDefinition) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "ownership": definition.ownership,
        "permissionPolicy": definition.permission_policy,
        "effects": list(definition.effects),
        "readOnly": definition.read_only,
        "destructive": definition.destructive,
        "interruptBehavior": definition.interrupt_behavior,
        "examples": [example.model_dump(exclude_none=True) for example in definition.examples],
    }
    if definition.ownership == "latent":
        # A model fulfils it: the client's, sampled, where offered; otherwise the caller, through latent_submit.
        meta["latent"] = {"fulfilledBy": "model", "submitWith": SUBMIT_TOOL}
    return meta


def to_mcp_tool(definition: ToolDefinition) -> types.Tool:
    return types.Tool(
        name=definition.name,
        title=definition.title,
        description=definition.description,
        input_schema=definition.input_schema(),
        output_schema=definition.output_schema(),
        annotations=types.ToolAnnotations(
            title=definition.title,
            read_only_hint=definition.read_only,
            destructive_hint=definition.destructive,
            idempotent_hint=definition.idempotent,
            open_world_hint=definition.open_world,
        ),
        _meta={TOOL_META_KEY: tool_meta(definition)},
    )


def to_mcp_content(block: Block) -> types.ContentBlock:
    if isinstance(block, TextBlock):
        return types.TextContent(type="text", text=block.text)
    if isinstance(block, ImageBlock):
        return types.ImageContent(type="image", data=block.data, mime_type=block.mime_type)
    if isinstance(block, AudioBlock):
        return types.AudioContent(type="audio", data=block.data, mime_type=block.mime_type)
    if isinstance(block, ResourceLinkBlock):
        return types.ResourceLink(
            type="resource_link", uri=block.uri, name=block.name, mime_type=block.mime_type, size=block.size
        )
    return types.EmbeddedResource(type="resource", resource=to_resource_contents(block))


def to_resource_contents(block: ResourceBlock) -> types.TextResourceContents | types.BlobResourceContents:
    if block.text is not None:
        return types.TextResourceContents(uri=block.uri, mime_type=block.mime_type, text=block.text)
    return types.BlobResourceContents(uri=block.uri, mime_type=block.mime_type, blob=block.blob or "")


def to_call_result(result: CallResult) -> types.CallToolResult:
    content: list[types.ContentBlock] = [to_mcp_content(block) for block in result.content] or [
        types.TextContent(type="text", text=result.text)
    ]
    if not result.is_error:
        return types.CallToolResult(content=content, structured_content=result.structured)
    meta: dict[str, Any] = {ERROR_META_KEY: {"kind": result.error_kind, "status": result.status}}
    if result.action_required is not None:
        meta[ACTION_META_KEY] = result.action_required
    return types.CallToolResult(content=content, is_error=True, _meta=meta)
