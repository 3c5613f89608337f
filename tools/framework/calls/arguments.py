"""A call's arguments: parsed against the tool's input model (one message naming each offending field), their
canonical form, and the digest an approval binds them to."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from managed_tools.stores.ids import canonical_json, sha256_hex
from managed_tools.tools.framework.context.what_runs import WhatRuns, visible_lines
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments

CONSENT_ARGS_CHARS = 2000


class ArgumentError(Exception):
    """Arguments that do not fit the tool; the message names each offending field."""


def parse_call(definition: ToolDefinition, arguments: Any) -> tuple[Arguments, dict[str, Any], str]:
    """Parse arguments as the tool's input model; return them, their canonical JSON form, and the digest of
    tool name + canonical arguments that an approval binds to."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ArgumentError(f"Arguments for {definition.name} must be a JSON object.")
    try:
        size = len(json.dumps(arguments, separators=(",", ":"), ensure_ascii=False, default=str).encode())
    except UnicodeEncodeError:  # JSON may spell a lone surrogate ("\\ud800"), which no UTF-8 text can hold
        raise ArgumentError(
            f"Arguments for {definition.name} hold a lone surrogate (such as \\ud800), which is not valid "
            "Unicode; send the text as UTF-8."
        ) from None
    if size > definition.max_argument_bytes:
        raise ArgumentError(
            f"Arguments for {definition.name} are {size} bytes; the limit is {definition.max_argument_bytes}."
        )
    try:
        args = definition.input_model.model_validate(arguments)
    except ValidationError as exc:
        raise ArgumentError(describe_validation(definition, exc)) from None
    canonical = args.model_dump(mode="json", by_alias=True)
    return args, canonical, approval_digest(definition, canonical, None)


def describe_validation(definition: ToolDefinition, exc: ValidationError) -> str:
    accepted = ", ".join(definition.input_schema().get("properties", {})) or "no arguments"
    problems: list[str] = []
    for error in exc.errors(include_url=False)[:8]:
        where = ".".join(str(part) for part in error["loc"])
        if not where:  # a rule across fields (exactly one of two): its message names them; there is no one field
            problems.append(error["msg"].removeprefix("Value error, "))
        elif error["type"] == "extra_forbidden":
            problems.append(f"unexpected field '{where}' (accepted: {accepted})")
        elif error["type"] == "missing":
            problems.append(f"missing required field '{where}'")
        elif error["loc"] and str(error["loc"][0]) in definition.hidden_args:
            problems.append(f"field '{where}': {error['msg']}")  # its value is never echoed
        else:
            got = clip(json.dumps(error.get("input"), default=str), 60)
            problems.append(f"field '{where}': {error['msg']} (got {got})")
    more = len(exc.errors()) - len(problems)
    tail = f"; and {more} more" if more > 0 else ""
    return f"Invalid arguments for {definition.name}: " + "; ".join(problems) + tail + "."


def approval_digest(definition: ToolDefinition, canonical: dict[str, Any], what: WhatRuns | None) -> str:
    """What an approval binds: the tool and its canonical arguments, and for a tool that runs a command the
    command, cwd and env it will run with (so changing them after the approval needs a new yes)."""
    bound: dict[str, Any] = {"tool": definition.name, "arguments": canonical}
    if what is not None:
        bound["runs"] = what.model_dump(mode="json")
    return sha256_hex(canonical_json(bound))


def without_hidden(definition: ToolDefinition, canonical: dict[str, Any]) -> dict[str, Any]:
    return {key: "(not shown)" if key in definition.hidden_args else value for key, value in canonical.items()}


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def consent_message(
    definition: ToolDefinition, shown_args: dict[str, Any], kind: str, preview: str | None, gap: str | None = None
) -> str:
    """The question. A tool that runs a command starts with it (its run context shows it whole, then its cwd and
    env), then the other arguments; any other tool starts with its arguments, then its own account of the action."""
    if preview is not None and definition.run_context is not None:
        rest = {key: value for key, value in shown_args.items() if key not in ("command", "cwd")}
        lines = [preview, f"Asked by {definition.name} ({definition.title})."]
        if rest:
            lines.append("Other arguments: " + shown_json(rest, indent=None))
        if gap is not None:
            lines.append(f"Asked because it needs more than the sandbox gives: {gap}.")
        return "\n".join(lines)
    shown = shown_json(shown_args, indent=2)
    if kind == "custom_tool":
        return f"The tool {definition.name} ({definition.title}) is answered by you. It was called with:\n{shown}"
    message = f"Allow {definition.name} ({definition.title}) to run with exactly these arguments?\n{shown}"
    return message if preview is None else message + "\n\n" + preview


def shown_json(arguments: dict[str, Any], *, indent: int | None) -> str:
    # JSON escapes line breaks inside strings, so each raw line break is structure; the rest is made visible.
    shown = visible_lines(json.dumps(arguments, indent=indent, ensure_ascii=False))
    if len(shown) > CONSENT_ARGS_CHARS:
        shown = shown[:CONSENT_ARGS_CHARS] + "\n… (arguments cut; the full set is bound by its digest)"
    return shown
