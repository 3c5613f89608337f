"""The registry: every tool the server publishes, checked against the catalogue's rules at start-up."""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import anyio
from pydantic import ValidationError

from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.toolsets import ToolSelection, keeps
from managed_tools.tools.framework.wire.errors import RegistryError

Visible = Callable[[ToolDefinition], bool]  # which tools a caller may see and call (server/auth/principal.py)
NAME_PATTERN = re.compile(r"^[a-z0-9_-]{1,64}$")
UPSTREAM_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what clients accept as a tool name
MAX_DESCRIPTION_CHARS = 200
# An upstream server's tool (ownership `mcp`) keeps its own description, often a paragraph the model needs
# (which directories it may touch); it is clipped to this, and its schema is the upstream's, kept verbatim.
MAX_UPSTREAM_DESCRIPTION_CHARS = 2000
GROUP_SEPARATOR = "__"
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
GROUP_TOOLSET = "mcp"  # the toolset of the groups published while serving: upstream servers' tools


class Registry:
    """An ordered, validated set of tool definitions, each in a toolset (tools/framework/definitions/toolsets.py)."""

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
        # Groups of tools that come and go while serving (an upstream server's, `<group>__<tool>`), and why a
        # group publishes nothing right now (it has not started).
        self._groups: dict[str, list[str]] = {}
        self._absent: dict[str, Callable[[], str]] = {}
        self._changed: anyio.Event | None = None
        self.version = 0
        self._selection: ToolSelection | None = None

    def add(self, definition: ToolDefinition, *, user: bool = False, toolset: str = "", checked: bool = False) -> None:
        """`user`: the tool comes from the user (a --tools-module or config), whatever ownership it declares.
        `checked`: a built-in tool as published, whose rules tests/tools/framework/test_published_catalogue.py checks
        (checking its examples here would build its models at start-up)."""
        if definition.name in self._tools:
            raise RegistryError(f"Tool name {definition.name!r} is registered twice; tool names must be unique.")
        if not checked:
            check_definition(definition, user=user)
        for variable in definition.variables:
            kind = self.variable_types().get(variable.name, variable.type)
            if kind != variable.type:
                raise RegistryError(
                    f"Tool {definition.name!r} declares {variable.name} as {variable.type}, another tool as {kind}; "
                    "a variable is one kind of value everywhere."
                )
        self._tools[definition.name] = definition
        self._toolsets[definition.name] = toolset

    def only(self, names: Iterable[str], selection: ToolSelection | None = None) -> Registry:
        """The registry of just these tools (already checked), in this registry's order; `selection` also
        narrows the groups published later (an upstream server's tools, toolset `mcp`)."""
        keep = set(names)
        selected = Registry()
        selected._tools = {name: d for name, d in self._tools.items() if name in keep}
        selected._toolsets = {name: self._toolsets[name] for name in selected._tools}
        selected.unfiltered = self.unfiltered
        selected._selection = selection
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

    def variable_types(self) -> dict[str, str]:
        """Each variable the catalogue declares, and whether it is a text or a secret."""
        return {v.name: v.type for definition in self._tools.values() for v in definition.variables}

    def replace_group(
        self, group: str, definitions: Iterable[ToolDefinition], *, absent: Callable[[], str] | None = None
    ) -> None:
        """Publish `definitions` (named `<group>__<tool>`) in place of the group's current tools, after the
        fixed catalogue; `absent` says why a call to one of its names finds nothing. Tells who waits on
        `changed()` when the published set differs."""
        fresh = list(definitions)
        for definition in fresh:
            if not definition.name.startswith(group + GROUP_SEPARATOR):
                raise RegistryError(f"Tool {definition.name!r} is not named {group}{GROUP_SEPARATOR}<tool>.")
            check_definition(definition, user=True)
        fresh = [d for d in fresh if self._selection is None or keeps(self._selection, GROUP_TOOLSET, d)]
        before = [self._tools[name] for name in self._groups.get(group, [])]
        names = [d.name for d in fresh]
        taken = (set(self._tools) - {d.name for d in before}) & set(names)
        if taken or len(set(names)) != len(names):
            twice = sorted(taken) or sorted({n for n in names if names.count(n) > 1})
            raise RegistryError(f"Tool name {twice[0]!r} is registered twice; tool names must be unique.")
        for definition in before:
            del self._tools[definition.name]
            del self._toolsets[definition.name]
        for definition in fresh:
            self._tools[definition.name] = definition
            self._toolsets[definition.name] = GROUP_TOOLSET
        self._groups[group] = [d.name for d in fresh]
        if absent is None:
            self._absent.pop(group, None)
        else:
            self._absent[group] = absent
        if [_listed(d) for d in before] != [_listed(d) for d in fresh]:
            self.version += 1
            if self._changed is not None:
                self._changed.set()
                self._changed = None

    async def changed(self) -> None:
        """Return once the published set of tools changes."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def absent_reason(self, name: str) -> str | None:
        """Why `name`, a tool of a group that publishes nothing right now, cannot be called."""
        group, separator, _ = name.partition(GROUP_SEPARATOR)
        reason = self._absent.get(group) if separator else None
        return None if reason is None else reason()

    def get(self, name: str) -> ToolDefinition | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def near_names(self, name: str, count: int = 3, visible: Visible | None = None) -> list[str]:
        names = [key for key, definition in self._tools.items() if visible is None or visible(definition)]
        return difflib.get_close_matches(name, names, n=count, cutoff=0.5)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolDefinition]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


def check_definition(definition: ToolDefinition, *, user: bool = False) -> None:
    """Apply every registry rule; raise RegistryError naming the tool and the broken rule."""
    name = definition.name
    if definition.ownership == "mcp" and not UPSTREAM_NAME_PATTERN.fullmatch(name):
        raise RegistryError(f"Tool name {name!r} must match {UPSTREAM_NAME_PATTERN.pattern}.")
    if definition.ownership != "mcp" and not NAME_PATTERN.fullmatch(name):
        message = f"Tool name {name!r} must match {NAME_PATTERN.pattern}."
        if definition.ownership == "managed" and not user:
            raise RegistryError(message)
        # Names of user-supplied tools are the user's to choose (seed 001 §8.3): warn, don't refuse.
        kind = "user" if user else definition.ownership
        log.warning("%s It is published anyway because it is a %s tool.", message, kind)
    description = definition.description.strip()
    if not description:
        raise RegistryError(f"Tool {name!r} has no description; a model cannot choose a tool it cannot read about.")
    upstream = definition.ownership == "mcp"
    limit = MAX_UPSTREAM_DESCRIPTION_CHARS if upstream else MAX_DESCRIPTION_CHARS
    if len(description) > limit:
        raise RegistryError(f"Tool {name!r} has a {len(description)}-character description; the limit is {limit}.")
    if not definition.title.strip():
        raise RegistryError(f"Tool {name!r} has no title.")
    if definition.ownership == "latent" and definition.handler is not None:
        raise RegistryError(f"Tool {name!r} is latent: a model fulfils it, so it cannot have a handler.")
    names = [variable.name for variable in definition.variables]
    if len(set(names)) != len(names):
        raise RegistryError(f"Tool {name!r} declares a variable twice: {', '.join(sorted(names))}.")
    if definition.handler is None and any(v.type == "secret" for v in definition.variables):
        raise RegistryError(
            f"Tool {name!r} has no code (a person or a model answers it), so it cannot declare a secret variable: "
            "whoever answers would see it."
        )
    if definition.read_only and definition.destructive:
        raise RegistryError(f"Tool {name!r} cannot be both read-only and destructive.")
    for label, schema in (("input", definition.input_schema()), ("output", definition.output_schema())):
        if not upstream:  # an upstream's schemas are its own, published as written and validated by jsonschema
            _check_schema(name, label, schema, schema.get("$defs", {}))
        if schema.get("type") != "object":
            raise RegistryError(f"Tool {name!r} {label} schema must be an object schema.")
    _check_examples(definition)


def _listed(definition: ToolDefinition) -> tuple[Any, ...]:
    """What tools/list shows of a definition: a change here is a list change."""
    return (definition.name, definition.title, definition.description, definition.input_schema(),
            definition.output_schema(), definition.permission_policy, definition.read_only, definition.destructive,
            definition.idempotent, definition.open_world)  # fmt: skip


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
