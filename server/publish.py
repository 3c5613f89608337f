"""Turning a ToolDefinition into an MCP Tool, and a CallResult into a CallToolResult."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from tools.definition import ToolDefinition
from tools.executor import CallResult

TOOL_META_KEY = "managed-tools/tool"
ERROR_META_KEY = "managed-tools/error"
ACTION_META_KEY = "managed-tools/requiresAction"


def tool_meta(definition: ToolDefinition) -> dict[str, Any]:
    return {
        "ownership": definition.ownership,
        "permissionPolicy": definition.permission_policy,
        "effects": list(definition.effects),
        "readOnly": definition.read_only,
        "destructive": definition.destructive,
        "interruptBehavior": definition.interrupt_behavior,
        "examples": [example.model_dump(exclude_none=True) for example in definition.examples],
    }


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


def to_call_result(result: CallResult) -> types.CallToolResult:
    content: list[types.ContentBlock] = [types.TextContent(type="text", text=result.text)]
    content += [types.ImageContent(type="image", data=data, mime_type=mime) for mime, data in result.images]
    if not result.is_error:
        return types.CallToolResult(content=content, structured_content=result.structured)
    meta: dict[str, Any] = {ERROR_META_KEY: {"kind": result.error_kind, "status": result.status}}
    if result.action_required is not None:
        meta[ACTION_META_KEY] = result.action_required
    return types.CallToolResult(content=content, is_error=True, _meta=meta)
