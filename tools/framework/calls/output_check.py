"""Debug mode: each tool's structured output checked against its published output schema before it is answered.

Production does not check per call: the output is a model the handler built (pydantic checked it as it was built)
and the client checks the answer against the schema it listed, so a second check on the server would be the same
work again. What neither sees is drift between a model and the schema the catalogue publishes (the published file,
tools/framework/definitions/published.py): with MANAGED_TOOLS_CHECK_OUTPUT=1 (the test suite sets it, for its
servers too) a call whose output does not match is refused, naming where, never the value found there."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from managed_tools.tools.framework.calls.call_result import Refusal
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import WireModel

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

ENV = "MANAGED_TOOLS_CHECK_OUTPUT"
MAX_SHOWN = 3  # of the places that do not match, named in the refusal
_validators: dict[type[WireModel], Draft202012Validator] = {}


def check(definition: ToolDefinition, structured: dict[str, Any]) -> None:
    """In debug mode, refuse an output that does not match the tool's output schema. The setting is read at each
    call (a lookup, no parse): a test turns it on without reloading anything."""
    if os.environ.get(ENV) == "1":
        mismatch(definition, structured)


def mismatch(definition: ToolDefinition, structured: dict[str, Any]) -> None:
    """Refuse `structured` if it does not match `definition`'s output schema: the refusal names each place (a JSON
    path) and the rule it breaks, never a value (a result may hold a secret)."""
    errors = sorted(_validator(definition).iter_errors(structured), key=lambda error: error.json_path)
    if errors:
        places = ", ".join(f"{error.json_path} ({error.validator})" for error in errors[:MAX_SHOWN])
        more = f" and {len(errors) - MAX_SHOWN} more" if len(errors) > MAX_SHOWN else ""
        raise Refusal("internal", f"{definition.name}'s output does not match its output schema at {places}{more}.")


def _validator(definition: ToolDefinition) -> Draft202012Validator:
    # Imported here: jsonschema costs ~150 ms at start-up, and only debug mode needs it. One validator per output
    # model, as its schema depends on the model alone (definition.py `_output_schema`).
    from jsonschema import Draft202012Validator

    model = definition.output_model
    if model not in _validators:
        _validators[model] = Draft202012Validator(definition.output_schema())
    return _validators[model]
