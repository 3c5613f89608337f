"""Prompts callable as tools (seed 000 §4, `definePrompt({exposeAsTool: true})` with its `SubpromptConfig`).

A prompt configured in config.json `promptTools` is published as a tool whose arguments are the prompt's typed
arguments. A call renders the template with them (`{{name}}` placeholders) and returns the text, so the calling
model can follow it; where the operator configured a model (config.json `models`, `Runtime.model_provider`) and
the prompt says `run`, the rendered prompt runs on that model as one turn without tools, and its answer comes back
too, the tokens the provider counted charged to the call's budget.

From `SubpromptConfig`: `name`; `includeTextResponse` (the model's text in the result, default true);
`includeErrors` (a provider's failure as a field of a successful result instead of an error result, default
false); `initUserMessageProperty` (the argument sent as the user's message, the rendered template then being the
system text). `includeToolCalls` and `initAttachmentsProperty` have nothing to act on here (the provider answers
with text alone; no attachments cross a thread) and are refused if given, rather than silently ignored.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from managed_tools.tools.framework.context.budget import BudgetExceededError
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.ports import ModelTurn, SamplingUnavailableError
from managed_tools.tools.framework.definitions.custom import schema_model
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.errors import RegistryError, ToolError
from managed_tools.tools.framework.wire.models import Arguments, WireModel

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
ArgumentName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
MAX_TEMPLATE_CHARS = 20_000
DEFAULT_MAX_TOKENS = 1024
PROMPT_TIMEOUT_SECONDS = 300.0  # a provider's turn
SYSTEM = "Follow the user's message."  # the system text when the rendered prompt is the user's message
MAX_ERROR_CHARS = 300


class PromptArgument(BaseModel):
    """One typed argument of a prompt tool."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: Literal["string", "integer", "number", "boolean"] = "string"
    description: str | None = Field(default=None, max_length=200)
    required: bool = True
    default: str | int | float | bool | None = None
    enum: list[str | int | float] | None = Field(default=None, min_length=1, max_length=100)


class PromptToolSpec(BaseModel):
    """One entry of `promptTools` in config.json."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: Annotated[str, Field(min_length=1, max_length=64)]
    title: str | None = None
    description: Annotated[str, Field(min_length=1)]
    template: Annotated[str, Field(min_length=1, max_length=MAX_TEMPLATE_CHARS)]
    arguments: dict[ArgumentName, PromptArgument] = Field(default_factory=dict)
    # "auto": run on the model provider when one is configured, else return the text; "never": always the text.
    run: Literal["auto", "never"] = "auto"
    max_tokens: Annotated[int, Field(ge=1, le=1 << 20)] = Field(default=DEFAULT_MAX_TOKENS, alias="maxTokens")
    include_text_response: bool = Field(default=True, alias="includeTextResponse")
    include_errors: bool = Field(default=False, alias="includeErrors")
    init_user_message_property: str | None = Field(default=None, alias="initUserMessageProperty")

    @model_validator(mode="before")
    @classmethod
    def _nothing_to_act_on(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in ("includeToolCalls", "initAttachmentsProperty"):
                if key in data:
                    raise ValueError(
                        f"{key} is not supported here: a provider answers with text alone and no attachments "
                        "cross a thread (docs/configuration.md, Prompt tools)"
                    )
        return data

    @model_validator(mode="after")
    def _placeholders_are_arguments(self) -> PromptToolSpec:
        unknown = sorted({name for name in PLACEHOLDER.findall(self.template) if name not in self.arguments})
        if unknown:
            raise ValueError(f"the template uses {', '.join(unknown)}, which are not among its arguments")
        user = self.init_user_message_property
        if user is not None and (user not in self.arguments or self.arguments[user].type != "string"):
            raise ValueError(f"initUserMessageProperty {user!r} must name one of its string arguments")
        return self


class PromptOutput(WireModel):
    prompt: str = Field(description="The rendered template (the system text when a user message was sent).")
    ran: bool = Field(description="Whether a model provider ran it; else follow the prompt yourself.")
    response: str | None = None
    error: str | None = None
    model_tokens: int | None = None


def input_schema(spec: PromptToolSpec) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for name, argument in spec.arguments.items():
        shown = argument.model_dump(include={"type", "description", "default", "enum"}, exclude_none=True)
        properties[name] = shown
    required = [name for name, argument in spec.arguments.items() if argument.required and argument.default is None]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def render(template: str, values: dict[str, Any]) -> str:
    """Each `{{name}}` replaced by its value: a string as it is, anything else as JSON; an omitted one by ""."""

    def value(match: re.Match[str]) -> str:
        given = values.get(match.group(1))
        if given is None:
            return ""
        return given if isinstance(given, str) else json.dumps(given)

    return PLACEHOLDER.sub(value, template)


def prompt_tool(spec: PromptToolSpec) -> ToolDefinition:
    ident = "".join(part.capitalize() for part in spec.name.replace("-", "_").split("_")) or "Prompt"
    try:
        arguments = schema_model(f"{ident}Input", input_schema(spec), Arguments)
    except RegistryError as exc:
        raise RegistryError(f"Prompt tool {spec.name}: {exc}") from None
    defaults = {name: a.default for name, a in spec.arguments.items() if a.default is not None}

    async def handler(ctx: ToolContext, args: Arguments) -> PromptOutput:
        values = {**defaults, **(args.model_extra or {})}
        return await run(ctx, spec, values)

    return ToolDefinition(
        name=spec.name,
        title=spec.title or spec.name,
        description=spec.description,
        input_model=arguments,
        output_model=PromptOutput,
        handler=handler,
        ownership="custom",
        own_transactions=True,  # no transaction held open while a provider thinks
        timeout_seconds=PROMPT_TIMEOUT_SECONDS,
    )


async def run(ctx: ToolContext, spec: PromptToolSpec, values: dict[str, Any]) -> PromptOutput:
    """Render, and run on the configured model where there is one and the prompt says so."""
    user = spec.init_user_message_property
    rendered = render(spec.template, values)
    provider = ctx.runtime.model_provider
    if provider is None or spec.run == "never":
        return PromptOutput(prompt=rendered, ran=False)
    left = ctx.budget.tokens_left()
    if left is not None and left <= 0:
        raise BudgetExceededError("no tokens are left in its budget to run the prompt on the model")
    max_tokens = spec.max_tokens if left is None else min(spec.max_tokens, left)
    system, message = (rendered, str(values.get(user) or "")) if user is not None else (SYSTEM, rendered)
    model = provider.child_model(lambda _session, _wake: ctx.ports.consent)  # a turn without tools asks nobody
    try:
        turn = await model.turn(system, [ModelTurn(role="user", text=message)], [], max_tokens=max_tokens)
        if turn.refused:
            raise SamplingUnavailableError(f"the model declined: {turn.text[:MAX_ERROR_CHARS]}")
    except SamplingUnavailableError as exc:
        if not spec.include_errors:
            raise ToolError(f"The model could not run {spec.name}: {exc}") from None
        return PromptOutput(prompt=rendered, ran=False, error=str(exc))
    ctx.budget.charge(turn.tokens)
    return PromptOutput(
        prompt=rendered,
        ran=True,
        response=turn.text if spec.include_text_response else None,
        model_tokens=turn.tokens,
    )
