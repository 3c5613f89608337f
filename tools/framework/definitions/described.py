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
PLACE_FIELDS = frozenset({"family", "module", "input", "output"})  # where a record says the tool's code is


def record(family: str, module: str, definition: ToolDefinition) -> dict[str, Any]:
    """What the published file keeps of a tool the code defines: everything but its code, and where that is."""
    words = definition.model_dump(mode="json", exclude=set(CODE_FIELDS))
    place = {"family": family, "module": module}
    models = {"input": definition.input_model, "output": definition.output_model}
    keys = {kind: published.model_key(model) for kind, model in models.items()}
    return place | keys | words


class Described(ToolDefinition):
    """A built-in tool from its record; `code` gives the definition its module defines (imported on first use)."""

    # Built once, when a definition is first validated; start-up only constructs them from validated fields.
    model_config = ConfigDict(defer_build=True)

    code: Callable[[], ToolDefinition]
    input_key: str
    output_key: str

    @classmethod
    def of(cls, entry: dict[str, Any], code: Callable[[], ToolDefinition]) -> Described:
        """The described tool of one record; raises ValidationError when its fields are not a definition's."""
        words = {k: v for k, v in entry.items() if k not in PLACE_FIELDS}
        # Validated as a definition with stand-in code, so a field's type is what the code's would be.
        stand_in = {"input_model": Arguments, "output_model": WireModel, "handler": None}
        fields = ToolDefinition.model_validate(words | stand_in).__dict__
        kept = {k: v for k, v in fields.items() if k not in CODE_FIELDS}
        described = cls.model_construct(**kept, code=code, input_key=entry["input"], output_key=entry["output"])
        for name in CODE_FIELDS:  # absent, so that `__getattr__` answers them from the code
            described.__dict__.pop(name, None)
        return described

    if not TYPE_CHECKING:  # the type checker sees the fields ToolDefinition declares

        def __getattr__(self, name: str) -> Any:
            if name in CODE_FIELDS:
                return getattr(self.code(), name)
            return super().__getattr__(name)

    # Served from the file; from the code itself if the file no longer holds it.
    def input_schema(self) -> dict[str, Any]:
        found = published.schema_of("input", self.input_key)
        return copy.deepcopy(found) if found is not None else self.code().input_schema()

    def output_schema(self) -> dict[str, Any]:
        found = published.schema_of("output", self.output_key)
        return copy.deepcopy(found) if found is not None else self.code().output_schema()
