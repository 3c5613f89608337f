"""Turning a ToolDefinition into an MCP Tool, and a CallResult into a CallToolResult's wire form."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from managed_tools.tools.framework.calls.call_result import CallResult
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.latent import SUBMIT_TOOL
from managed_tools.tools.framework.wire.content import (
    AudioBlock,
    Block,
    ImageBlock,
    ResourceBlock,
    ResourceLinkBlock,
    TextBlock,
)

TOOL_META_KEY = "managed-tools/tool"
ERROR_META_KEY = "managed-tools/error"
ACTION_META_KEY = "managed-tools/requiresAction"
WITHHELD_META_KEY = "managed-tools/withheld"  # result fields for the person, never the model's context


# What a client of `_meta` reads when the key is absent (docs/performance.md): only values that differ go out.
META_DEFAULTS: dict[str, Any] = {
    "ownership": "managed",
    "permissionPolicy": "always_allow",
    "interruptBehavior": "block",
}


def tool_meta(definition: ToolDefinition) -> dict[str, Any]:
    """What a client may act on beyond the annotations: who owns the tool, whether a call waits for a person,
    what it touches, whether cancelling stops it, worked examples. Defaults and empty lists are left out; read-only
    and destructive are the annotations' hints, not repeated here."""
    given: dict[str, Any] = {
        "ownership": definition.ownership,
        "permissionPolicy": definition.permission_policy,
        "effects": list(definition.effects),
        "interruptBehavior": definition.interrupt_behavior,
        "examples": [example.model_dump(exclude_none=True) for example in definition.examples],
    }
    meta = {key: value for key, value in given.items() if value != META_DEFAULTS.get(key, [])}
    if definition.ownership == "latent":
        # A model fulfils it: the client's, sampled, where offered; otherwise the caller, through latent_submit.
        meta["latent"] = {"fulfilledBy": "model", "submitWith": SUBMIT_TOOL}
    return meta


def tool_annotations(definition: ToolDefinition) -> types.ToolAnnotations:
    """The hints, written out (a client that reads a missing hint as false would take a shell for a closed,
    harmless tool), except where the protocol says they mean nothing: destructiveHint and idempotentHint for a
    read-only tool. The title is the tool's own `title`, not repeated here."""
    writes = not definition.read_only
    return types.ToolAnnotations(
        read_only_hint=definition.read_only,
        destructive_hint=definition.destructive if writes else None,
        idempotent_hint=definition.idempotent if writes else None,
        open_world_hint=definition.open_world,
    )


def to_mcp_tool(definition: ToolDefinition) -> types.Tool:
    return types.Tool(
        name=definition.name,
        title=definition.title,
        description=definition.description,
        input_schema=definition.input_schema(),
        output_schema=_without(definition.output_schema(), definition.context_excluded),
        annotations=tool_annotations(definition),
        _meta={TOOL_META_KEY: tool_meta(definition)},
    )


def _without(schema: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """An output schema without the fields kept from the model (their values never reach it in a result)."""
    if not fields:
        return schema
    properties = {k: v for k, v in schema.get("properties", {}).items() if k not in fields}
    required = [k for k in schema.get("required", []) if k not in fields]
    return {**schema, "properties": properties, "required": required}


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


# A tools/call answer: a CallToolResult's wire form (its JSON, camelCase keys; `resultType`, which the SDK's check of
# a handshake-era answer leaves out, as the model has it), or a 2026-07-28 input-required round.
WireResult = dict[str, Any]
Reply = WireResult | types.InputRequiredResult


def _wire_block(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock):  # nearly every result: no model built only to be dumped
        return {"type": "text", "text": block.text}
    return to_mcp_content(block).model_dump(by_alias=True, mode="json", exclude_none=True)


def to_wire_result(result: CallResult) -> WireResult:
    """The CallToolResult a call answers with, as the SDK sends it: a mapping is passed to its protocol check as
    given, where a `CallToolResult` would be dumped first (issue 41: the result is written once). The structured
    output is the dict the executor dumped the tool's output to, and the text the JSON it wrote of that dict."""
    content = [_wire_block(block) for block in result.content] or [{"type": "text", "text": result.text}]
    if not result.is_error:
        wire: WireResult = {"content": content, "isError": False, "resultType": "complete"}
        if result.structured is not None:
            wire["structuredContent"] = result.structured
        if result.withheld:
            wire["_meta"] = {WITHHELD_META_KEY: result.withheld}
        return wire
    meta: dict[str, Any] = {ERROR_META_KEY: {"kind": result.error_kind, "status": result.status}}
    if result.action_required is not None:
        meta[ACTION_META_KEY] = result.action_required
    return {"content": content, "isError": True, "resultType": "complete", "_meta": meta}
