"""An OpenAI-compatible chat-completions endpoint (OpenAI, and the many servers that speak its API): the request
for one turn and the turn its reply makes."""

from __future__ import annotations

import json
from typing import Any

from managed_tools.tools.framework.context.ports import ModelCall, ModelTurn, ToolSpec


class ReplyError(ValueError):
    """A reply that does not have the shape of the API's answer; the message is safe to show."""


def headers(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def body(model: str, system: str, conversation: list[ModelTurn], tools: list[ToolSpec], max_tokens: int) -> Any:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in conversation:
        if turn.role == "assistant":
            calls = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in turn.calls
            ]
            messages.append(
                {"role": "assistant", "content": turn.text or None, **({"tool_calls": calls} if calls else {})}
            )
            continue
        messages += [{"role": "tool", "tool_call_id": call_id, "content": text} for call_id, text, _ in turn.results]
        if turn.text:
            messages.append({"role": "user", "content": turn.text})
    request: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
    if tools:
        request["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in tools
        ]
    return request


def parse(reply: Any) -> tuple[ModelTurn, int]:
    """The assistant's turn and the tokens the provider counted for it."""
    try:
        message = reply["choices"][0]["message"]
        refusal = message.get("refusal")
        calls = [
            ModelCall(id=c["id"], name=c["function"]["name"], arguments=_arguments(c["function"]["arguments"]))
            for c in message.get("tool_calls") or []
        ]
        usage = reply.get("usage") or {}
        tokens = int(usage.get("total_tokens") or 0)
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ReplyError(f"the reply is not a chat completion (missing {exc})") from None
    if refusal:
        return ModelTurn(role="assistant", text=str(refusal), refused=True), tokens
    return ModelTurn(role="assistant", text=str(message.get("content") or ""), calls=calls), tokens


def _arguments(raw: Any) -> dict[str, Any]:
    """A call's arguments: a JSON object in a string (the API's form); anything else is not a call we can make."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        raise ReplyError("a tool call's arguments are not JSON") from None
    if not isinstance(value, dict):
        raise ReplyError("a tool call's arguments are not a JSON object")
    return value


def error_text(reply: Any) -> str | None:
    """The provider's own words for a failed request, where it gave some."""
    error = reply.get("error") if isinstance(reply, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return message if isinstance(message, str) else None
