"""Base models for tool inputs and outputs: camelCase on the wire, snake_case in Python, no extra fields."""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
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
