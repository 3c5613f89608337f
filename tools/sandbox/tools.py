"""`sandbox_describe` and `sandbox_execute` (reference §2h): the reference's sandbox action names, each run through
the executor under the name of the tool it routes to (files, shell). So every rule of that tool holds: a tool this
server does not serve (`--toolsets`, `--exclude-tools`) or the caller may not use (OAuth scopes) is refused, its
policy (`--ask`, `--allow`, config.json `policy`) and its permission pause apply, and its own span events are
recorded beside sandbox_execute's. The few actions without a tool of their own (list_dir, stat, mkdir, append_text)
run under the tool whose power they use (glob, write), with the action named in their arguments so that an approval
of one is never an approval of another. sandbox_execute keeps no transaction open: a routed command never holds the
write lock while it runs.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import anyio
from pydantic import BaseModel, Field

from managed_tools.sandbox import files
from managed_tools.tools.environment.setup import ConfinementView, confinement_view, mounted_resources
from managed_tools.tools.files import tools as file_tools
from managed_tools.tools.framework.calls import executor
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, JsonObject, NoArguments, WireModel

Action = Literal[
    "inspect", "list_dir", "read_text", "write_text", "append_text", "replace_text", "mkdir", "stat",
    "find_entries", "glob_entries", "grep_text", "run_command", "run_shell", "inspect_persistent_shell",
    "open_persistent_shell", "exec_persistent_shell", "close_persistent_shell", "wait_persistent_shell",
]  # fmt: skip
MAX_LIST = 1000


class ListInput(Arguments):
    # Each action without a tool of its own names itself in its arguments (sandbox_execute puts it there, and no
    # default, so the question shows it): the approval digest binds it.
    sandbox_action: Literal["list_dir"]
    path: file_tools.PathArg = "/workspace"


class StatInput(Arguments):
    sandbox_action: Literal["stat"]
    path: file_tools.PathArg = "/workspace"


class MkdirInput(Arguments):
    sandbox_action: Literal["mkdir"]
    path: file_tools.PathArg = "/workspace"


class AppendInput(Arguments):
    sandbox_action: Literal["append_text"]
    path: file_tools.PathArg
    content: Annotated[str, Field(max_length=file_tools.MAX_WRITE_CHARS)]


class Entry(WireModel):
    name: str
    kind: Literal["file", "directory", "symlink", "other"]
    size: int


class ListOutput(WireModel):
    path: str
    count: int
    truncated: bool
    entries: list[Entry]


class StatOutput(WireModel):
    path: str
    exists: bool
    kind: Literal["file", "directory", "symlink", "other"] | None
    size: int | None
    modified_at: str | None


class MkdirOutput(WireModel):
    path: str
    created: bool


def _kind(mode: int) -> Literal["file", "directory", "symlink", "other"]:
    if stat_module.S_ISLNK(mode):
        return "symlink"
    if stat_module.S_ISDIR(mode):
        return "directory"
    return "file" if stat_module.S_ISREG(mode) else "other"


async def _list_dir(ctx: ToolContext, args: ListInput) -> ListOutput:
    resolved = ctx.runtime.guard.resolve(args.path, "list")
    if not await anyio.to_thread.run_sync(files.is_dir, resolved):
        raise ToolError(f"{resolved.virtual} is not a directory.")

    def scan() -> list[Entry]:
        private = os.path.realpath(ctx.runtime.environment.data_dir)
        entries = [
            Entry(name=name, kind=_kind(info.st_mode), size=info.st_size)
            for name, info in files.list_dir(resolved)
            if os.path.join(resolved.host, name) != private  # the server's own data directory is never shown
        ]
        return sorted(entries, key=lambda e: e.name)

    entries = await anyio.to_thread.run_sync(scan)
    return ListOutput(
        path=resolved.virtual, count=len(entries), truncated=len(entries) > MAX_LIST, entries=entries[:MAX_LIST]
    )


async def _stat(ctx: ToolContext, args: StatInput) -> StatOutput:
    resolved = ctx.runtime.guard.resolve(args.path, "list")
    info = await anyio.to_thread.run_sync(files.lstat, resolved)
    if info is None:
        return StatOutput(path=resolved.virtual, exists=False, kind=None, size=None, modified_at=None)
    modified = datetime.fromtimestamp(info.st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return StatOutput(
        path=resolved.virtual, exists=True, kind=_kind(info.st_mode), size=info.st_size, modified_at=modified
    )


async def _mkdir(ctx: ToolContext, args: MkdirInput) -> MkdirOutput:
    resolved = ctx.runtime.guard.resolve(args.path, "write")
    created = await anyio.to_thread.run_sync(files.make_dirs, resolved)
    return MkdirOutput(path=resolved.virtual, created=created)


async def _append(ctx: ToolContext, args: AppendInput) -> file_tools.WriteOutput:
    resolved = ctx.runtime.guard.resolve(args.path, "modify")

    def append() -> bytes:
        existing = b""
        if resolved.exists:
            with files.open_read(resolved) as handle:
                existing = handle.read()
        data = existing + args.content.encode()
        files.atomic_write(resolved, data)
        return data

    data = await anyio.to_thread.run_sync(append)
    file_tools.touch(ctx, resolved)
    digest = hashlib.sha256(data).hexdigest()
    return file_tools.WriteOutput(path=resolved.virtual, bytes=len(data), sha256=digest, created=not resolved.exists)


@dataclass(frozen=True)
class Own:
    """An action with no tool of its own: its input, output and handler, run under the tool whose power it uses."""

    model: type[Arguments]
    output: type[WireModel]
    handler: Callable[[ToolContext, Any], Awaitable[BaseModel]]


@dataclass(frozen=True)
class Route:
    tool: str  # whose name, policy, permission pause, scope and events the action runs under
    own: Own | None = None


ROUTES: dict[str, Route] = {
    "inspect": Route("sandbox_describe"),
    "list_dir": Route("glob", Own(ListInput, ListOutput, _list_dir)),
    "read_text": Route("read"),
    "write_text": Route("write"),
    "append_text": Route("write", Own(AppendInput, file_tools.WriteOutput, _append)),
    "replace_text": Route("edit"),
    "mkdir": Route("write", Own(MkdirInput, MkdirOutput, _mkdir)),
    "stat": Route("glob", Own(StatInput, StatOutput, _stat)),
    "find_entries": Route("glob"),
    "glob_entries": Route("glob"),
    "grep_text": Route("grep"),
    "run_command": Route("bash"),
    "run_shell": Route("shell_run"),
    "inspect_persistent_shell": Route("shell_describe"),
    "open_persistent_shell": Route("shell_open"),
    "exec_persistent_shell": Route("shell_exec"),
    "close_persistent_shell": Route("shell_close"),
    "wait_persistent_shell": Route("shell_wait"),
}
assert set(ROUTES) == set(Action.__args__)  # type: ignore[attr-defined]


def routed_definition(ctx: ToolContext, action: str) -> ToolDefinition:
    """The definition `action` runs as: the served tool it routes to, or for an action without a tool of its own,
    that tool with the action's input, output and handler (and none of the tool's previews, which read its own
    arguments). Refused when the tool is not served here or the caller may not use it."""
    route = ROUTES[action]
    served = ctx.runtime.registry.get(route.tool)
    if served is None:
        raise ToolError(
            f"{action} runs as {route.tool}, which this server does not serve (--toolsets, --tools, "
            f"--exclude-tools, --read-only or config.json); sandbox_execute cannot run it either."
        )
    if ctx.may_use is not None and not ctx.may_use(served):
        raise ToolError(f"{action} runs as {route.tool}, which this caller's access does not include.")
    if route.own is None:
        return served
    return served.model_copy(
        update={
            "input_model": route.own.model,
            "output_model": route.own.output,
            "handler": route.own.handler,
            "consent_preview": None,
            "run_context": None,
            "asks_when": None,
            "precondition": None,
            "render": None,
            "examples": (),
            "hidden_args": (),
        }
    )


class ActionView(WireModel):
    name: str
    input_fields: list[str]
    routed_to: str | None


class DescribeOutput(WireModel):
    actions: list[ActionView]
    mounts: list[dict[str, Any]]
    constraints: list[str]
    examples: list[dict[str, Any]]
    confinement: ConfinementView


async def sandbox_describe(ctx: ToolContext, _: NoArguments) -> DescribeOutput:
    actions = [
        ActionView(name=name, input_fields=_fields(ctx, route), routed_to=route.tool) for name, route in ROUTES.items()
    ]
    return DescribeOutput(
        actions=actions,
        mounts=[m.model_dump(by_alias=True) for m in mounted_resources(ctx.runtime)],
        constraints=[
            "Paths are relative to /workspace or virtual (/workspace/..., /workspace/agent/..., /vaults/<name>/...).",
            "/workspace/agent is read-only here: stage, compare and promote to change it.",
            "Vaults only allow listing.",
            "Each action runs as the tool it routes to, with that tool's policy and approval; an action whose tool "
            "this server does not serve is refused.",
        ],
        examples=[
            {"name": "read_text", "input": {"path": "README.md", "lineCount": 40}},
            {"name": "list_dir", "input": {"path": "/workspace"}},
        ],
        confinement=confinement_view(ctx.runtime),
    )


def _fields(ctx: ToolContext, route: Route) -> list[str]:
    """The action's input fields: its own, or its tool's (none when that tool is not served here)."""
    if route.own is not None:
        schema = route.own.model.model_json_schema(by_alias=True)
    elif (served := ctx.runtime.registry.get(route.tool)) is not None:
        schema = served.input_schema()
    else:
        return []
    return [name for name in schema.get("properties", {}) if name != "sandboxAction"]


class ExecuteArgs(Arguments):
    name: Action
    input: JsonObject = Field(
        default_factory=dict, description="The action's arguments as JSON (see sandbox_describe)."
    )


class ExecuteOutput(WireModel):
    ok: bool
    name: str
    output: dict[str, Any]


async def sandbox_execute(ctx: ToolContext, args: ExecuteArgs) -> ExecuteOutput:
    own = ROUTES[args.name].own is not None
    arguments = {**args.input, "sandboxAction": args.name} if own else args.input
    result = await executor.execute_routed(ctx, routed_definition(ctx, args.name), arguments)
    if result.is_error or result.structured is None:
        raise executor.Routed(result)
    return ExecuteOutput(ok=True, name=args.name, output=result.structured)


DEFINITIONS = (
    ToolDefinition(
        name="sandbox_describe",
        title="Describe the sandbox",
        description="Describe the sandbox: its action names and inputs, the mounts, and the constraints.",
        input_model=NoArguments,
        output_model=DescribeOutput,
        handler=sandbox_describe,
        effects=("resource_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="sandbox_execute",
        title="Run a sandbox action",
        description="Run one sandbox action (read_text, write_text, list_dir, grep_text, ...) as the tool it "
        "routes to, with that tool's policy and approval.",
        input_model=ExecuteArgs,
        output_model=ExecuteOutput,
        handler=sandbox_execute,
        read_only=False,
        effects=("resource_read", "resource_write", "sandbox_execute"),
        max_argument_bytes=4 * file_tools.MAX_WRITE_CHARS + 4096,
        # Routed actions never use the call's transaction: file actions touch no table, and the shell ones
        # open short transactions of their own rather than hold the write lock while a process runs.
        own_transactions=True,
        examples=(ToolExample(description="List the workspace", input={"name": "list_dir", "input": "{}"}),),
        accepts_overrides=False,  # its words say how routing keeps each action's own policy: a contract
    ),
)
