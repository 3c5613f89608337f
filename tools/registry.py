"""The registry: every tool the server publishes, checked against the catalogue's rules at start-up."""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import ValidationError

from managed_tools.tools.definition import ToolDefinition
from managed_tools.tools.errors import RegistryError

NAME_PATTERN = re.compile(r"^[a-z0-9_-]{1,64}$")
MAX_DESCRIPTION_CHARS = 200
MAX_SCHEMA_DEPTH = 7
# The argument kinds seed 001 §3.2 allows: primitives, literals, enums, optional/nullable/default,
# arrays, objects, records and unions. Anything else (conditionals, negation, ...) is refused.
ALLOWED_TYPES = frozenset({"string", "number", "integer", "boolean", "null", "array", "object"})
ALLOWED_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems", "enum", "const",
        "anyOf", "oneOf", "discriminator", "$ref", "$defs", "default", "description", "title", "examples",
        "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems", "minProperties",
        "maxProperties", "propertyNames", "writeOnly", "readOnly", "deprecated",
        # display names of a legacy titled enum: an annotation, but a custom tool's form needs it (SEP-1330)
        "enumNames",
        # the dialect a hand-written schema declares (MCP schemas are JSON Schema 2020-12)
        "$schema",
    }
)  # fmt: skip

log = logging.getLogger(__name__)


class Registry:
    """An ordered, validated set of tool definitions, each in a toolset (tools/toolsets.py)."""

    def __init__(self, definitions: Iterable[ToolDefinition] = (), *, user: Iterable[ToolDefinition] = ()) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        self._toolsets: dict[str, str] = {}
        # Every tool this server could serve, before `only` left some out: what `managed-tools tools` shows, and
        # how `managed-tools pending` tells a hidden tool's request. Never shown to a model.
        self.unfiltered = self
        for definition in definitions:
            self.add(definition)
        for definition in user:
            self.add(definition, user=True)

    def add(self, definition: ToolDefinition, *, user: bool = False, toolset: str = "") -> None:
        """`user`: the tool comes from the user (a --tools-module or config), whatever ownership it declares."""
        if definition.name in self._tools:
            raise RegistryError(f"Tool name {definition.name!r} is registered twice; tool names must be unique.")
        check_definition(definition, user=user)
        self._tools[definition.name] = definition
        self._toolsets[definition.name] = toolset

    def only(self, names: Iterable[str]) -> Registry:
        """The registry of just these tools (already checked), in this registry's order."""
        keep = set(names)
        selected = Registry()
        selected._tools = {name: d for name, d in self._tools.items() if name in keep}
        selected._toolsets = {name: self._toolsets[name] for name in selected._tools}
        selected.unfiltered = self.unfiltered
        return selected

    def hidden(self, name: str) -> bool:
        """A tool this server knows but does not serve (its toolsets, --exclude-tools or --read-only)."""
        return name not in self._tools and self.unfiltered.get(name) is not None

    def toolsets(self) -> dict[str, list[str]]:
        """Each toolset with tools here, and their names, in publishing order."""
        grouped: dict[str, list[str]] = {}
        for name, toolset in self._toolsets.items():
            grouped.setdefault(toolset, []).append(name)
        return grouped

    def get(self, name: str) -> ToolDefinition | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def near_names(self, name: str, count: int = 3) -> list[str]:
        return difflib.get_close_matches(name, list(self._tools), n=count, cutoff=0.5)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolDefinition]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


def check_definition(definition: ToolDefinition, *, user: bool = False) -> None:
    """Apply every registry rule; raise RegistryError naming the tool and the broken rule."""
    name = definition.name
    if not NAME_PATTERN.fullmatch(name):
        message = f"Tool name {name!r} must match {NAME_PATTERN.pattern}."
        if definition.ownership == "managed" and not user:
            raise RegistryError(message)
        # Names of user-supplied tools are the user's to choose (seed 001 §8.3): warn, don't refuse.
        kind = "user" if user else definition.ownership
        log.warning("%s It is published anyway because it is a %s tool.", message, kind)
    description = definition.description.strip()
    if not description:
        raise RegistryError(f"Tool {name!r} has no description; a model cannot choose a tool it cannot read about.")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise RegistryError(
            f"Tool {name!r} has a {len(description)}-character description; the limit is {MAX_DESCRIPTION_CHARS}."
        )
    if not definition.title.strip():
        raise RegistryError(f"Tool {name!r} has no title.")
    if definition.ownership == "latent" and definition.handler is not None:
        raise RegistryError(f"Tool {name!r} is latent: a model fulfils it, so it cannot have a handler.")
    if definition.read_only and definition.destructive:
        raise RegistryError(f"Tool {name!r} cannot be both read-only and destructive.")
    for label, schema in (("input", definition.input_schema()), ("output", definition.output_schema())):
        _check_schema(name, label, schema, schema.get("$defs", {}))
        if schema.get("type") != "object":
            raise RegistryError(f"Tool {name!r} {label} schema must be an object schema.")
    _check_examples(definition)


def _check_schema(tool: str, label: str, root: dict[str, Any], defs: dict[str, Any]) -> None:
    def walk(node: Any, depth: int, refs: tuple[str, ...], where: str) -> None:
        if not isinstance(node, dict):
            return
        unknown = set(node) - ALLOWED_KEYWORDS
        if unknown:
            raise RegistryError(f"Tool {tool!r} {label} schema uses unsupported keywords {sorted(unknown)} at {where}.")
        kinds = node.get("type")
        for kind in kinds if isinstance(kinds, list) else [kinds] if kinds else []:
            if kind not in ALLOWED_TYPES:
                raise RegistryError(f"Tool {tool!r} {label} schema uses unsupported type {kind!r} at {where}.")
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = ref.removeprefix("#/$defs/")
            if target in refs:
                raise RegistryError(f"Tool {tool!r} {label} schema is recursive at {where} ({target}).")
            if target not in defs:
                raise RegistryError(f"Tool {tool!r} {label} schema has an unresolved $ref {ref!r}.")
            walk(defs[target], depth, (*refs, target), f"{where}->{target}")
        nested = depth + 1 if kinds in ("object", "array") or "properties" in node or "items" in node else depth
        if nested > MAX_SCHEMA_DEPTH:
            raise RegistryError(f"Tool {tool!r} {label} schema nests deeper than {MAX_SCHEMA_DEPTH} levels at {where}.")
        for key, sub in node.get("properties", {}).items():
            walk(sub, nested, refs, f"{where}.{key}")
        for key in ("items", "additionalProperties", "propertyNames"):
            if isinstance(node.get(key), dict):
                walk(node[key], nested, refs, f"{where}[{key}]")
        for key in ("anyOf", "oneOf", "prefixItems"):
            for index, sub in enumerate(node.get(key, [])):
                walk(sub, depth if key != "prefixItems" else nested, refs, f"{where}.{key}[{index}]")

    walk({k: v for k, v in root.items() if k != "$defs"}, 0, (), "$")


def _check_examples(definition: ToolDefinition) -> None:
    for index, example in enumerate(definition.examples):
        try:
            definition.input_model.model_validate(example.input)
            if example.output is not None:
                definition.output_model.model_validate(example.output)
        except ValidationError as exc:
            raise RegistryError(
                f"Tool {definition.name!r} example {index} ({example.description!r}) does not match its models: "
                f"{exc.errors(include_url=False)[0]['msg']}"
            ) from exc
