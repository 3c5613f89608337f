"""The ToolDefinition contract (docs/architecture.md §2; reference §1; seeds 000, 001, 002, 003)."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.what_runs import WhatRuns
from managed_tools.tools.framework.definitions import published
from managed_tools.tools.framework.wire.content import Block
from managed_tools.tools.framework.wire.models import Arguments, WireModel

Ownership = Literal["managed", "mcp", "custom", "latent"]
PermissionPolicy = Literal["always_allow", "always_ask"]
InterruptBehavior = Literal["cancel", "block"]
ToolEffect = Literal[
    "session_read",
    "session_write",
    "resource_read",
    "resource_write",
    "memory_read",
    "memory_write",
    "learning_read",
    "skill_read",
    "sandbox_execute",
]
WRITE_EFFECTS: frozenset[str] = frozenset({"session_write", "resource_write", "memory_write", "sandbox_execute"})

Handler = Callable[[ToolContext, Any], Awaitable[BaseModel]]
# What a person must see to judge an always_ask call beyond its arguments (a shell command and its cwd, the
# target and a short diff of a promotion). Runs before the call in a read snapshot; must not change anything.
ConsentPreview = Callable[[ToolContext, Any], Awaitable[str]]
# For a tool that runs a command: the command, cwd and env it will run with. The executor shows it to the person
# and binds the approval digest to it (a later change of cwd or env needs a new yes); the handler runs exactly it.
# Runs in a read snapshot; must not change anything; may raise ToolError (a command too long to show whole).
RunContext = Callable[[ToolContext, Any], Awaitable[WhatRuns]]
# For an always_allow tool some of whose calls need a person anyway (learning_record promoting into the shared
# MEMORY.md): True when these arguments must be approved like an always_ask call.
AsksWhen = Callable[[Any], bool]
# For a tool whose every effect the sandbox contains (shell_run, shell_exec): None when this call runs inside the
# full sandbox, so `--auto-sandboxed` runs it unasked; else why it needs more than the sandbox gives (then it asks).
Contained = Callable[[ToolContext, Any], str | None]
# Why this call needs a person whatever its policy says (untrusted content promoted into shared memory), or None.
# Runs in a read snapshot before the permission step; its reason is shown in the question.
AsksBecause = Callable[[ToolContext, Any], Awaitable[str | None]]
# A check that can refuse a call before a person is asked (an outcome gate): no point asking for approval of a
# call that would be refused anyway. Runs in a read snapshot; the handler re-checks inside its transaction.
Precondition = Callable[[ToolContext, Any], Awaitable[None]]
# How a successful output is shown to the model when compact JSON is not the right form (an image, a
# document). The output still travels as structuredContent; `render` only chooses the content blocks.
Render = Callable[[Any], Sequence[Block]]

DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_ARGUMENT_BYTES = 1 << 20


class Variable(BaseModel):
    """A value a tool needs from its environment (seed 000 §3); secrets are encrypted at rest, never shown."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    type: Literal["text", "secret"] = "text"
    required: bool = False
    scoped: bool = False
    description: str = ""


class ToolExample(BaseModel):
    """A worked call: validated against the tool's models at registration (seed 002)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    description: Annotated[str, Field(min_length=1, max_length=200)]
    input: dict[str, Any]
    output: dict[str, Any] | None = None


class ToolDefinition(BaseModel):
    """One tool of the catalogue: its schemas, its policy, and its handler.

    `handler=None` is a tool without code: a person answers a `custom` one; a model fulfils a `latent` one (seed
    003), following `instructions` where given.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str
    title: str
    description: str
    input_model: type[Arguments]
    output_model: type[WireModel]
    handler: Handler | None
    consent_preview: ConsentPreview | None = None
    run_context: RunContext | None = None
    asks_when: AsksWhen | None = None
    asks_because: AsksBecause | None = None
    contained: Contained | None = None
    precondition: Precondition | None = None
    render: Render | None = None
    ownership: Ownership = "managed"
    permission_policy: PermissionPolicy = "always_allow"
    effects: tuple[ToolEffect, ...] = ()
    read_only: bool = True
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False
    interrupt_behavior: InterruptBehavior = "block"
    # The handler waits on something slow (a process) and opens its own short transactions through
    # ctx.runtime.db instead of running inside one the executor holds; ctx.tx is then closed.
    own_transactions: bool = False
    examples: tuple[ToolExample, ...] = ()
    variables: tuple[Variable, ...] = ()
    timeout_seconds: float = Field(default=DEFAULT_TIMEOUT_SECONDS, gt=0)
    max_argument_bytes: int = Field(default=DEFAULT_MAX_ARGUMENT_BYTES, gt=0)
    # Arguments whose values are never recorded in events or shown back (shell_set_env's value).
    hidden_args: tuple[str, ...] = ()
    # Its arguments and results are scanned for credentials (tools/framework/wire/secret_scan.py): the shell's tools
    # that run a command or return its output. An upstream server's tools are scanned by their ownership.
    scans_secrets: bool = False
    instructions: str | None = None
    # May config.json `overrides` give it another title or description (seed 002)? Not where the words are a
    # contract a model must read as written.
    accepts_overrides: bool = True
    # Top-level result fields kept out of the model's context (seed 002 `exclude_value_from_context`): the person
    # sees them in the result's `_meta`, the audit their digests (tools/framework/definitions/overrides.py).
    context_excluded: tuple[str, ...] = ()

    def asks(self, args: Arguments) -> bool:
        """Does this call wait for a person's approval?"""
        return self.permission_policy == "always_ask" or (self.asks_when is not None and self.asks_when(args))

    @property
    def scanned(self) -> bool:
        """Are this tool's arguments and results scanned for credentials?"""
        return self.scans_secrets or self.ownership == "mcp"

    def input_schema(self) -> dict[str, Any]:
        return copy.deepcopy(_input_schema(self.input_model))

    def output_schema(self) -> dict[str, Any]:
        return copy.deepcopy(_output_schema(self.output_model))


# A schema depends on its model alone and takes pydantic milliseconds to build: built once per model (publishing
# the catalogue, the setup contract and argument errors all ask), handed out as copies. A built-in model's is read
# from the published file (tools/framework/definitions/published.py), so that start-up builds no tool model.
@functools.cache
def _input_schema(model: type[Arguments]) -> dict[str, Any]:
    return published.schema("input", model) or built_input_schema(model)


@functools.cache
def _output_schema(model: type[WireModel]) -> dict[str, Any]:
    return published.schema("output", model) or built_output_schema(model)


def built_input_schema(model: type[Arguments]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True)
    return schema if _verbatim(model) else _without_refusals(_drop_null_options(_clean_schema(schema)))


def built_output_schema(model: type[WireModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="serialization")
    return schema if _verbatim(model) else inline_single_use(hoist_repeats(lean_output(schema)))


def _verbatim(model: type[BaseModel]) -> bool:
    """A model that stands for a schema someone wrote (a custom tool's) is published as written: its titles
    are labels a person reads in a form, not names pydantic generated."""
    return bool(getattr(model, "VERBATIM_SCHEMA", False))


def _clean_schema(node: Any, *, output: bool = False) -> Any:
    """Drop the generated `title` keywords: they repeat the property names and bloat tools/list. An output
    schema (`output`) also loses what a client gains nothing from (docs/decisions/lean-catalogue.md): a field's
    description belongs in the tool's description or nowhere; our own models never add a field, so
    `additionalProperties: false` only repeats the property list; and a nullable primitive is `type: [T, "null"]`
    rather than `anyOf` of two schemas (the same instances validate). Together: 14 KB of 108 KB of output schemas."""
    if isinstance(node, list):
        return [_clean_schema(item, output=output) for item in node]
    if not isinstance(node, dict):
        return node
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if _noise(key, value, output=output):
            continue
        if key in ("default", "const", "enum", "examples"):
            cleaned[key] = value
        elif key in ("properties", "$defs"):
            cleaned[key] = {name: _clean_schema(sub, output=output) for name, sub in value.items()}
        else:
            cleaned[key] = _clean_schema(value, output=output)
    options = cleaned.get("anyOf")
    if output and isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        other = next(option for option in options if option != {"type": "null"})
        if set(other) == {"type"} and isinstance(other["type"], str):
            del cleaned["anyOf"]
            cleaned["type"] = [other["type"], "null"]
    return cleaned


def _noise(key: str, value: Any, *, output: bool) -> bool:
    if key == "title" or (output and key == "description"):
        return isinstance(value, str)
    return output and key == "additionalProperties" and value is False


def lean_output(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema as published: without titles and the output noise (`_clean_schema`)."""
    cleaned: dict[str, Any] = _clean_schema(schema, output=True)
    return cleaned


def _drop_null_options(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional argument is published as its plain type: omitting it is how a client says "none"."""
    for holder in [schema, *schema.get("$defs", {}).values()]:
        for name, prop in holder.get("properties", {}).items():
            options = prop.get("anyOf")
            if prop.get("default", 0) is None and isinstance(options, list) and {"type": "null"} in options:
                rest = [option for option in options if option != {"type": "null"}]
                merged = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
                merged.update(rest[0] if len(rest) == 1 else {"anyOf": rest})
                holder["properties"][name] = merged
    return schema


# What the executor refuses anyway, with a message naming the field: an empty string, a field not in the schema.
# Published, they cost ~3,000 characters of every model's context and teach it nothing (docs/decisions/
# catalogue-budget.md).
REFUSED_ANYWAY = (("minLength", 1), ("additionalProperties", False))


def _without_refusals(node: Any) -> Any:
    if isinstance(node, list):
        return [_without_refusals(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: value if key in ("default", "const", "enum", "examples") else _without_refusals(value)
        for key, value in node.items()
        if (key, value) not in REFUSED_ANYWAY
    }


HOISTED_MIN_CHARS = 60  # a shorter repeat costs less than the $ref that would replace it


def repeated_parts(schema: dict[str, Any]) -> list[str]:
    """The subschemas (as canonical JSON) written out more than once: pydantic hoists nested models into $defs,
    not the Literal types several models share."""
    counts: dict[str, int] = {}

    def walk(node: Any, top: bool) -> None:
        if isinstance(node, dict):
            text = json.dumps(node, sort_keys=True)
            if not top and len(text) >= HOISTED_MIN_CHARS:
                counts[text] = counts.get(text, 0) + 1
            for key, value in node.items():
                if key not in ("default", "const", "enum", "examples"):
                    walk(value, False)
        elif isinstance(node, list):
            for item in node:
                walk(item, False)

    walk(schema, True)
    return [text for text, count in counts.items() if count > 1]


def hoist_repeats(schema: dict[str, Any]) -> dict[str, Any]:
    """Each repeated subschema once, in $defs, named after the first property that uses it."""
    repeats = set(repeated_parts(schema))
    if not repeats:
        return schema
    defs: dict[str, Any] = schema.get("$defs", {})
    added: dict[str, Any] = {}
    names: dict[str, str] = {}

    def name_for(text: str, hint: str) -> str:
        if text not in names:
            base = hint[:1].upper() + hint[1:] or "Shared"
            name, n = base, 1
            while name in defs or name in added:
                n += 1
                name = f"{base}{n}"
            names[text] = name
            added[name] = {}  # the name taken before its body is built: a repeat inside gets a name of its own
            added[name] = replace(json.loads(text), name, top=True)
        return names[text]

    def replace(node: Any, hint: str, *, top: bool = False) -> Any:
        if isinstance(node, list):
            return [replace(item, hint) for item in node]
        if not isinstance(node, dict):
            return node
        text = json.dumps(node, sort_keys=True)
        if not top and text in repeats:
            return {"$ref": f"#/$defs/{name_for(text, hint)}"}
        return {
            key: value if key in ("default", "const", "enum", "examples")
            else {k: replace(v, k) for k, v in value.items()} if key == "properties"
            else replace(value, hint)
            for key, value in node.items()
        }  # fmt: skip

    body: dict[str, Any] = replace({key: value for key, value in schema.items() if key != "$defs"}, "", top=True)
    kept = {name: replace(sub, name, top=True) for name, sub in defs.items()}
    return body | {"$defs": kept | added}


def _refs(node: Any) -> list[str]:
    """The names of the local definitions a (sub)schema refers to, once per reference."""
    if isinstance(node, list):
        return [name for item in node for name in _refs(item)]
    if not isinstance(node, dict):
        return []
    own = [node["$ref"].removeprefix("#/$defs/")] if isinstance(node.get("$ref"), str) else []
    return own + [name for key, value in node.items() if key not in ("enum", "const", "default", "examples")
                  for name in _refs(value)]  # fmt: skip


def inline_single_use(schema: dict[str, Any]) -> dict[str, Any]:
    """Each definition referred to once written where it is used: pydantic puts every nested model in `$defs`,
    and a `$ref` used once costs a client more bytes and about twice the time to check a result against (its
    resolver) than the subschema written in place. Definitions used more than once, or reaching themselves (a
    recursive model), stay."""
    defs: dict[str, Any] = schema.get("$defs", {})
    body = {key: value for key, value in schema.items() if key != "$defs"}
    uses: dict[str, int] = {}
    for name in _refs([body, *defs.values()]):
        uses[name] = uses.get(name, 0) + 1

    def reaches(name: str, target: str, seen: set[str]) -> bool:
        return any(
            ref == target or (ref not in seen and ref in defs and reaches(ref, target, seen | {ref}))
            for ref in _refs(defs[name])
        )

    once = {name for name in defs if uses.get(name) == 1 and not reaches(name, name, {name})}
    if not once:
        return schema

    def place(node: Any) -> Any:
        if isinstance(node, list):
            return [place(item) for item in node]
        if not isinstance(node, dict):
            return node
        if set(node) == {"$ref"} and node["$ref"].removeprefix("#/$defs/") in once:
            return place(defs[node["$ref"].removeprefix("#/$defs/")])
        return {key: value if key in ("enum", "const", "default", "examples") else place(value)
                for key, value in node.items()}  # fmt: skip

    kept = {name: place(sub) for name, sub in defs.items() if name not in once}
    placed: dict[str, Any] = place(body)
    return placed | ({"$defs": kept} if kept else {})


def model_visible_chars(definition: ToolDefinition) -> int:
    """What a model reads of a tool in tools/list: its name, its description and its input schema as compact JSON
    (the catalogue budget's measure, tests/tools/test_catalogue_budget.py)."""
    schema = json.dumps(definition.input_schema(), separators=(",", ":"), ensure_ascii=False)
    return len(definition.name) + len(definition.description) + len(schema)
