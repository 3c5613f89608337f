"""Base models for tool inputs and outputs: camelCase on the wire, snake_case in Python, no extra fields."""

import functools
import types
import typing
from typing import Annotated, Any, Literal

import pydantic_core
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """Every tool output: camelCase on the wire, built from snake_case names in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        defer_build=True,
    )


class Arguments(WireModel):
    """Every tool input: only the published camelCase names are accepted, and extra fields are refused
    so that a typo is an error rather than a silently ignored option."""

    model_config = ConfigDict(validate_by_name=False)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """`null` for an optional field means "not given" (its default), as every published schema says: OpenAI's
        strict function calling sends every field, `null` for the ones the model leaves out
        (docs/decisions/portable-schemas.md)."""
        if not isinstance(data, dict):
            return data
        absent = _nulls_dropped(cls)
        if not absent or not any(data.get(name, 0) is None for name in absent):
            return data
        return {key: value for key, value in data.items() if not (value is None and key in absent)}


@functools.cache
def _nulls_dropped(model: type[BaseModel]) -> frozenset[str]:
    """The published names of the optional fields whose type has no room for None: for them `null` is dropped before
    validation. A field that takes None keeps it (its default, or a meaning of its own)."""
    return frozenset(
        field.alias or name
        for name, field in model.model_fields.items()
        if not field.is_required() and not _admits_none(field.annotation)
    )


def _admits_none(annotation: Any) -> bool:
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _admits_none(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_admits_none(arg) for arg in typing.get_args(annotation))
    return origin is Literal and None in typing.get_args(annotation)


def _object_from_text(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return pydantic_core.from_json(value)  # bounded nesting: a deep text is refused, never a RecursionError
    except ValueError:
        raise ValueError("is not the JSON text of an object") from None


# A free-form JSON object (another tool's arguments), published as a string holding its JSON text: the one form
# every client's schema rules take (OpenAI strict and Gemini refuse an object of undeclared keys;
# docs/decisions/portable-schemas.md). The object itself is still taken, as the reference's callers send it.
JsonObject = Annotated[
    dict[str, Any],
    BeforeValidator(_object_from_text),
    WithJsonSchema({"type": "string"}, mode="validation"),
]


# The input of a tool that takes no arguments. No docstring: pydantic would publish it in every such schema.
class NoArguments(Arguments):
    pass


# A list-shaped tool's input: `format: "compact"` asks, for this call, for the compact text form that the server's
# `--result-format` otherwise decides (tools/framework/wire/compact.py). No docstring, as above; no description either:
# the name and its one value say it, and the model-visible catalogue has no room to spare.
class Formatted(Arguments):
    format: Literal["compact"] | None = None


NonEmptyStr = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


def _refuse_nul(text: str | None) -> str | None:
    if text is not None and "\x00" in text:
        raise ValueError("holds a NUL byte, which no program argument can carry")
    return text


# Text that becomes a program's argument (a shell command, an rg pattern): an argv cannot carry a NUL byte.
NoNul = AfterValidator(_refuse_nul)
SessionId = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=64),
    # "Default: the current session." once in the server's instructions, not in ~25 schemas (catalogue budget).
]


class NextTool(WireModel):
    """A suggested next call: the tool, its arguments, and why."""

    tool: str
    args: dict[str, Any]
    rationale: str


# Optimistic preconditions of a versioned write (memory_write, the promotions): write only if nobody else did.
ExpectedVersionId = Annotated[str | None, Field(description="Write only if still the latest version.")]
ExpectedContentHash = Annotated[
    str | None,
    Field(pattern=r"^[0-9a-f]{64}$", description="Write only if the content has this sha256."),
]
RequireOutcomePass = Annotated[
    bool | None,
    Field(description="Need a passing outcome (default: if defined)."),
]
