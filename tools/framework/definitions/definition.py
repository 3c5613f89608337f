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
from managed_tools.tools.framework.definitions.schemas import built_input_schema, built_output_schema
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
# Raises ToolError saying why what the handler needs (an upstream server) is not up; run before the precondition
# and before any person is asked to approve the call.
Ready = Callable[[], None]
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
    ready: Ready | None = None
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
    def asks_for_some_arguments(self) -> bool:
        """Does an always_allow call of it ask a person for some arguments (`asks_when`)?"""
        return self.asks_when is not None

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


def model_visible_chars(definition: ToolDefinition) -> int:
    """What a model reads of a tool in tools/list: its name, its description and its input schema as compact JSON
    (the catalogue budget's measure, tests/tools/test_catalogue_budget.py)."""
    schema = json.dumps(definition.input_schema(), separators=(",", ":"), ensure_ascii=False)
    return len(definition.name) + len(definition.description) + len(schema)
