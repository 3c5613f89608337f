"""Latent tools (seed 003): declared by their schemas alone and fulfilled by a model, not by code.

Where the client offers sampling, the executor asks the client's model for the output and checks it against the
output schema (retrying once with the error). Everywhere else the call is handed back to the calling model, which
answers through `latent_submit`. This module holds what both paths share: the declaration, what the model is
told, and the check of its answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from managed_tools.tools.framework.definitions.custom import CustomToolSpec, OutputMismatch, check_output, schema_tool
from managed_tools.tools.framework.definitions.definition import DEFAULT_TIMEOUT_SECONDS, ToolDefinition

LATENT_TIMEOUT_SECONDS = 300.0  # a model's turn, possibly twice
SAMPLING_MAX_TOKENS = 4096
SUBMIT_TOOL = "latent_submit"
FENCED = re.compile(r"```(?:json)?\s*\n(.*)\n\s*```", re.DOTALL)


class LatentToolSpec(CustomToolSpec):
    """One entry of `latentTools` in config.json (or `latent_tool(LatentToolSpec(...))` in a --tools-module)."""

    instructions: str | None = Field(default=None, max_length=4000)


def latent_tool(spec: LatentToolSpec) -> ToolDefinition:
    return schema_tool(spec, ownership="latent", instructions=spec.instructions, timeout_seconds=LATENT_TIMEOUT_SECONDS)


def as_declared(definition: ToolDefinition) -> ToolDefinition:
    """Seed 003's zero-configuration rule: a tool with no activity (no handler) and no other way to be answered is
    latent. A user's tool defined with `handler=None` and no ownership is a model's to fulfil, not refused."""
    if definition.handler is not None or definition.ownership != "managed":
        return definition
    timeout = definition.timeout_seconds
    return definition.model_copy(
        update={
            "ownership": "latent",
            "timeout_seconds": LATENT_TIMEOUT_SECONDS if timeout == DEFAULT_TIMEOUT_SECONDS else timeout,
        }
    )


def check_text(definition: ToolDefinition, text: str) -> dict[str, Any]:
    """A sampled answer: one JSON object, bare or in a single fenced block."""
    fenced = FENCED.fullmatch(text.strip())
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except json.JSONDecodeError as exc:
        raise OutputMismatch(f"the answer is not a JSON object ({exc.msg} at character {exc.pos})") from None
    return check_output(definition, value)


def _task(definition: ToolDefinition, values: Mapping[str, str]) -> str:
    """The description, the instructions, and the tool's resolved variables (texts only: a latent tool declares no
    secret)."""
    task = f"{definition.description.strip()}"
    if definition.instructions:
        task = f"{task}\n\n{definition.instructions.strip()}"
    if values:
        task += "\n\nIts variables:\n" + "\n".join(f"- {name} = {value}" for name, value in sorted(values.items()))
    return task


def _schema(definition: ToolDefinition) -> str:
    return json.dumps(definition.output_schema(), indent=2, ensure_ascii=False)


def sampling_prompt(
    definition: ToolDefinition,
    arguments: dict[str, Any],
    values: Mapping[str, str],
    refused: str | None = None,
) -> str:
    """What the client's model is asked (again, with the reason, when its first answer was refused)."""
    prompt = (
        f"You are the implementation of the tool `{definition.name}` ({definition.title}).\n\n"
        f"{_task(definition, values)}\n\n"
        f"It was called with these arguments:\n{json.dumps(arguments, indent=2, ensure_ascii=False)}\n\n"
        f"Reply with one JSON object and nothing else. It must match this JSON Schema:\n{_schema(definition)}"
    )
    if refused is None:
        return prompt
    return f"{prompt}\n\nYour previous answer was refused: {refused}. Answer again, fixing that."


def handback_message(definition: ToolDefinition, call_id: str, values: Mapping[str, str]) -> str:
    """What the calling model is told when nobody can be sampled: it does the work and hands the result back."""
    return (
        f"{definition.name} is a latent tool: no code runs it, and this client offers no sampling, so you "
        f"produce its result yourself.\n\nTask: {_task(definition, values)}\n\n"
        f"Work it out from the arguments you passed, then call {SUBMIT_TOOL} with "
        f'{{"callId": "{call_id}", "output": <your result>}}. The output must match this JSON Schema:\n'
        f"{_schema(definition)}"
    )
