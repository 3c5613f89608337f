"""Results a caller may ask for in part (issue 27, issue 29 item 3): `agent_describe_setup {sections}`,
`session_get_snapshot {fields}`, `environment_describe {sections}`.

A `Partial` output leaves out the parts a caller did not ask for: they are absent from the result (not null,
which would mean "none"), and its published schema requires only the parts always shown, so a client that checks
structuredContent against the output schema (the Python SDK's does) accepts a partial answer. Asked for nothing,
it is whole."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Self

from pydantic import Field, GetJsonSchemaHandler, PrivateAttr, SerializerFunctionWrapHandler, model_serializer
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema as cs

from managed_tools.tools.framework.wire.models import WireModel

# The argument that names the parts of a Partial result wanted: published without an enum (the error lists them).
PART_NAMES = Field(description="Only these top-level fields.")


class Partial(WireModel):
    """An output whose parts (its top-level fields but those in ALWAYS) a caller may leave out."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset()  # Python names of the fields every answer carries
    _shown: frozenset[str] | None = PrivateAttr(default=None)  # wire names; None: every part

    @classmethod
    def parts(cls) -> tuple[str, ...]:
        """The wire names a caller may choose among."""
        return tuple(field.alias or name for name, field in cls.model_fields.items() if name not in cls.ALWAYS)

    def only(self, names: Iterable[str] | None) -> Self:
        """This answer with only the parts named (wire or Python names) besides ALWAYS; None keeps it whole. A
        copy: a cached answer shared by several calls stays whole."""
        if names is None:
            return self
        shown = self.model_copy()
        fields = type(self).model_fields
        wire = {fields[name].alias or name if name in fields else name for name in names}
        shown._shown = frozenset(wire) | {fields[name].alias or name for name in self.ALWAYS}
        return shown

    @model_serializer(mode="wrap")
    def _only_shown(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if self._shown is None or not isinstance(data, dict):
            return data
        return {key: value for key, value in data.items() if key in self._shown}

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: cs.CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        # The schema of the fields themselves (not of the wrapping serializer's untyped return), in which only
        # the parts always shown are required.
        fields: Any = {key: value for key, value in schema.items() if key != "serialization"}
        published = handler.resolve_ref_schema(handler(fields))
        always = {cls.model_fields[name].alias or name for name in cls.ALWAYS}
        published["required"] = [name for name in published.get("required", []) if name in always]
        return published


def one_of(valid: Sequence[str], noun: str) -> Callable[[Any], Any]:
    """A validator for a list of names: every unknown one refused in one message that lists the valid ones
    (pydantic would say it once per bad item). Repeats are dropped."""

    def check(value: Any) -> Any:
        if not isinstance(value, list):
            return value  # the type check says what is wrong
        unknown = [str(item) for item in value if item not in valid]
        if unknown:
            quoted = ", ".join(repr(name) for name in unknown[:5])
            raise ValueError(f"unknown {noun} {quoted}; the {noun}s are: {', '.join(valid)}")
        return list(dict.fromkeys(value))

    return check
