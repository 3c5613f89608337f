"""Step 8, the result shaped: its JSON text and blocks, the fields kept from the model withheld, secrets masked, the
compact form, and the bounded argument preview the events record."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from managed_tools.tools.framework.calls.arguments import clip
from managed_tools.tools.framework.calls.call_result import CallResult
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire import redaction, secret_scan
from managed_tools.tools.framework.wire.compact import compact_text
from managed_tools.tools.framework.wire.content import Block, ResourceBlock, TextBlock

PREVIEW_CHARS = 200


def success(structured: dict[str, Any], content: tuple[Block, ...] = (), ctx: ToolContext | None = None) -> CallResult:
    """`content` replaces the JSON text when a tool renders its output; what a handler attached (an image it
    read, a file it stored) follows the text."""
    text = json.dumps(structured, separators=(",", ":"), ensure_ascii=False)
    if ctx is None:
        return CallResult("success", text, structured, content=content)
    if ctx.attachments:
        content = (*(content or (TextBlock(text=text),)), *(b for shown in ctx.attachments for b in shown.blocks()))
    return CallResult("success", text, structured, content=content, touched=tuple(sorted(ctx.touched)))


def withhold(definition: ToolDefinition, result: CallResult) -> CallResult:
    """The result without the fields the model must not see: its text is the JSON of the rest (a rendering could
    show them, so it goes), the attached blocks stay; the fields go to `withheld`."""
    if not definition.context_excluded or result.structured is None:
        return result
    visible = {k: v for k, v in result.structured.items() if k not in definition.context_excluded}
    withheld = {k: v for k, v in result.structured.items() if k in definition.context_excluded}
    text = json.dumps(visible, separators=(",", ":"), ensure_ascii=False)
    kept = tuple(block for block in result.content if not isinstance(block, TextBlock))
    content = (TextBlock(text=text), *kept) if kept else ()
    return replace(result, text=text, structured=visible, content=content, withheld=withheld)


def compacted(result: CallResult) -> CallResult:
    """The compact text (tools/framework/wire/compact.py) in place of the JSON text, for a result the tool did not
    render itself. Built from the structured output once redacted and masked, so every secret already left it: the
    compact form escapes `|` and line breaks, which a scrub of the raw values would no longer find."""
    text = compact_text(result.structured) if result.structured is not None and not result.content else None
    return result if text is None else replace(result, content=(TextBlock(text=text),))


def mask_found(result: CallResult) -> CallResult:
    """The result with every credential the scan finds masked: in the structured output and the blocks shown, and
    in the text (which is their JSON, where a line break inside a value is written `\\n`)."""
    texts = [
        *secret_scan.strings(result.structured),
        *(b.text or "" for b in result.content if isinstance(b, TextBlock | ResourceBlock)),
    ]
    hits = secret_scan.find_in(texts if result.structured is not None or result.content else [result.text])
    if not hits:
        return result
    values = [hit.value for hit in hits]
    in_json = [json.dumps(value, ensure_ascii=False)[1:-1] for value in values]
    return replace(
        result,
        text=redaction.scrub(result.text, [*values, *in_json]),
        structured=redaction.scrub(result.structured, values),
        content=tuple(scrub_block(block, values) for block in result.content),
        secrets_found=tuple(secret_scan.kinds(hits)),
    )


def scrub_block(block: Block, hidden: list[str] | None = None) -> Block:
    if isinstance(block, TextBlock | ResourceBlock) and block.text is not None:
        return block.model_copy(update={"text": redaction.scrub(block.text, hidden)})
    return block


def preview(value: Any) -> Any:
    """Arguments as recorded in events: every string cut to PREVIEW_CHARS so the log stays bounded."""
    if isinstance(value, str):
        return clip(value, PREVIEW_CHARS)
    if isinstance(value, list):
        return [preview(item) for item in value[:20]]
    if isinstance(value, dict):
        return {key: preview(item) for key, item in list(value.items())[:40]}
    return value
