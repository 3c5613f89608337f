"""Custom tools (ownership `custom`): declared by the user with JSON Schemas, answered by a person.

A custom tool has no handler: the executor asks the person (through the Consent port) for the result, checks it
against the declared output schema, and returns it.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from managed_tools.tools.framework.definitions.definition import ToolDefinition, Variable
from managed_tools.tools.framework.wire.errors import RegistryError
from managed_tools.tools.framework.wire.models import Arguments, WireModel

M = TypeVar("M", bound=WireModel)
MAX_ERROR_CHARS = 500


class CustomToolSpec(BaseModel):
    """One entry of `customTools` in the user's configuration file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: Annotated[str, Field(min_length=1, max_length=64)]
    title: str | None = None
    description: Annotated[str, Field(min_length=1)]
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"}, alias="inputSchema")
    output_schema: dict[str, Any] = Field(alias="outputSchema")
    read_only: bool = Field(default=True, alias="readOnly")
    # Text values the tool needs (docs: Variables); a tool without code never declares a secret.
    variables: tuple[Variable, ...] = ()


def schema_model(name: str, schema: dict[str, Any], base: type[M]) -> type[M]:
    """A model whose validation and published schema are exactly the user's JSON Schema."""
    # Imported here: jsonschema costs ~150 ms at start-up, and only a custom or upstream tool needs it.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise RegistryError(f"Custom tool schema {name} is not a valid JSON Schema: {exc.message}") from None
    validator = Draft202012Validator(schema)
    published = copy.deepcopy(schema)

    class SchemaModel(base):  # type: ignore[misc,valid-type]
        model_config = ConfigDict(extra="allow")
        VERBATIM_SCHEMA: ClassVar[bool] = True

        @model_validator(mode="before")
        @classmethod
        def _matches_schema(cls, data: Any) -> Any:
            error = next(iter(sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))), None)
            if error is not None:
                where = ".".join(str(p) for p in error.absolute_path) or "value"
                raise ValueError(f"{where}: {error.message}")
            return data

        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return copy.deepcopy(published)

    SchemaModel.__name__ = SchemaModel.__qualname__ = name
    return SchemaModel


def custom_tool(spec: CustomToolSpec) -> ToolDefinition:
    return schema_tool(spec, ownership="custom", timeout_seconds=3600)


def schema_tool(spec: CustomToolSpec, **fields: Any) -> ToolDefinition:
    """A handler-less tool whose schemas are the spec's; `fields` say who fulfils it (ownership, timeout...)."""
    ident = "".join(part.capitalize() for part in spec.name.replace("-", "_").split("_")) or "Custom"
    return ToolDefinition(
        name=spec.name,
        title=spec.title or spec.name,
        description=spec.description,
        input_model=schema_model(f"{ident}Input", spec.input_schema, Arguments),
        output_model=schema_model(f"{ident}Output", spec.output_schema, WireModel),
        handler=None,
        read_only=spec.read_only,
        variables=spec.variables,
        **fields,
    )


class OutputMismatch(ValueError):
    """An answer for a handler-less tool (a person's or a model's) does not fit its output; the message says where."""


def check_output(definition: ToolDefinition, value: Any) -> dict[str, Any]:
    """The answer as the tool's output, or OutputMismatch naming the first field that breaks the schema."""
    try:
        output = definition.output_model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        raise OutputMismatch((f"{where}: {message}" if where else message)[:MAX_ERROR_CHARS]) from None
    return output.model_dump(mode="json", by_alias=True)
