"""The Anthropic Messages API: the request for one turn and the turn its reply makes."""

from __future__ import annotations

from typing import Any

from managed_tools.server.providers.openai_chat import ReplyError, error_text
from managed_tools.tools.framework.context.ports import ModelCall, ModelTurn, ToolSpec

API_VERSION = "2023-06-01"
__all__ = ["body", "error_text", "headers", "parse"]  # the error body has the same shape as OpenAI's


def headers(key: str | None) -> dict[str, str]:
    return {"anthropic-version": API_VERSION, **({} if key is None else {"x-api-key": key})}


def body(model: str, system: str, conversation: list[ModelTurn], tools: list[ToolSpec], max_tokens: int) -> Any:
    messages: list[dict[str, Any]] = []
    for turn in conversation:
        content: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": error}
            for call_id, text, error in turn.results
        ]
        if turn.text:
            content.append({"type": "text", "text": turn.text})
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in turn.calls]
        messages.append({"role": turn.role, "content": content})
    request: dict[str, Any] = {"model": model, "system": system, "messages": messages, "max_tokens": max_tokens}
    if tools:
        request["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools
        ]
    return request


def parse(reply: Any) -> tuple[ModelTurn, int]:
    try:
        blocks = reply["content"]
        text = "".join(b["text"] for b in blocks if b.get("type") == "text")
        calls = [
            ModelCall(id=b["id"], name=b["name"], arguments=b["input"]) for b in blocks if b.get("type") == "tool_use"
        ]
        usage = reply.get("usage") or {}
        tokens = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ReplyError(f"the reply is not a Messages API message (missing {exc})") from None
    if reply.get("stop_reason") == "refusal":
        return ModelTurn(role="assistant", text=text, refused=True), tokens
    return ModelTurn(role="assistant", text=text, calls=calls), tokens
