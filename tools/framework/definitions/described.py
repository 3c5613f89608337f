"""A built-in tool as the published file describes it: served without importing its family's code.

tools/list, the setup contract, presets and tool search read a tool's words, flags and schemas, never its code. A
`Described` definition holds those (read from published.json, tools/framework/definitions/published.py) and no
models or handlers: the first time anything asks for one (a call, an argument error, an example check), it
imports the family's module through `code` and answers from the definition the module defines. docs/decisions/
lazy-families.md says why.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict

from managed_tools.tools.framework.definitions import published
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments, WireModel

# What a definition holds that is code (its models and callables): never in the file, always from the module.
CODE_FIELDS = frozenset(
    {
        "input_model", "output_model", "handler", "consent_preview", "run_context", "asks_when", "asks_because",
        "contained", "precondition", "ready", "render",
    }
)  # fmt: skip
# Where a record says the tool's code is, and which of its code fields are set (`asks_when is None` is answered
# without importing the family: the setup contract asks it of every tool).
PLACE_FIELDS = frozenset({"family", "module", "input", "output", "code"})


def record(family: str, module: str, definition: ToolDefinition) -> dict[str, Any]:
    """What the published file keeps of a tool the code defines: everything but its code, and where that is."""
    words = definition.model_dump(mode="json", exclude=set(CODE_FIELDS))
    place = {"family": family, "module": module}
    models = {"input": definition.input_model, "output": definition.output_model}
    keys = {kind: published.model_key(model) for kind, model in models.items()}
    present = {"code": sorted(name for name in CODE_FIELDS if getattr(definition, name) is not None)}
    return place | keys | present | words


class Described(ToolDefinition):
    """A built-in tool from its record; `code` gives the definition its module defines (imported on first use)."""

    # Built once, when a definition is first validated; start-up only constructs them from validated fields.
    model_config = ConfigDict(defer_build=True)

    code: Callable[[], ToolDefinition]
    input_key: str
    output_key: str
    present: frozenset[str]

    @classmethod
    def of(cls, entry: dict[str, Any], code: Callable[[], ToolDefinition]) -> Described:
        """The described tool of one record; raises ValueError (ValidationError) when it is not a tool's record."""
        keys, present = [entry["input"], entry["output"]], entry["code"]
        if not all(isinstance(v, str) for v in [*keys, *present]) or not set(present) <= CODE_FIELDS:
            raise ValueError(f"not a tool's record: {entry.get('name')!r}")
        words = {k: v for k, v in entry.items() if k not in PLACE_FIELDS}
        # Validated as a definition with stand-in code, so a field's type is what the code's would be.
        stand_in = {"input_model": Arguments, "output_model": WireModel, "handler": None}
        fields = ToolDefinition.model_validate(words | stand_in).__dict__
        kept = {k: v for k, v in fields.items() if k not in CODE_FIELDS}
        place = {"input_key": keys[0], "output_key": keys[1], "present": frozenset(present)}
        described = cls.model_construct(**kept, code=code, **place)
        for name in CODE_FIELDS:  # absent, so that `__getattr__` answers them from the code
            described.__dict__.pop(name, None)
        return described

    if not TYPE_CHECKING:  # the type checker sees the fields ToolDefinition declares

        def __getattr__(self, name: str) -> Any:
            if name in CODE_FIELDS:
                return getattr(self.code(), name) if name in self.present else None
            return super().__getattr__(name)

    @property
    def asks_for_some_arguments(self) -> bool:
        return "asks_when" in self.present

    # Served from the file; from the code itself if the file no longer holds it. A copy given models of its own
    # (sandbox_execute's actions run under a tool with their own input and output) has those models' schemas.
    def input_schema(self) -> dict[str, Any]:
        if "input_model" in self.__dict__:
            return super().input_schema()
        found = published.schema_of("input", self.input_key)
        return copy.deepcopy(found) if found is not None else self.code().input_schema()

    def output_schema(self) -> dict[str, Any]:
        if "output_model" in self.__dict__:
            return super().output_schema()
        found = published.schema_of("output", self.output_key)
        return copy.deepcopy(found) if found is not None else self.code().output_schema()
