"""`sandbox_describe` and `sandbox_execute` (reference §2h): the reference's sandbox action names, each routed to
the same guarded code as the file and shell tools. `run_shell` and `exec_persistent_shell` are refused with the
tool to call (shell_run, shell_exec): their approval must not be sidestepped through this door. sandbox_execute
keeps no transaction open, so a routed command never holds the write lock while it runs.
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
from pydantic import BaseModel, Field, ValidationError

from managed_tools.sandbox import files
from managed_tools.tools.environment.setup import ConfinementView, confinement_view, mounted_resources
from managed_tools.tools.files import tools as file_tools
from managed_tools.tools.framework.context import ToolContext
from managed_tools.tools.framework.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.errors import ToolError
from managed_tools.tools.framework.models import Arguments, NoArguments, WireModel
from managed_tools.tools.shell import history as shell_history
from managed_tools.tools.shell import oneshot as shell_oneshot
from managed_tools.tools.shell import persistent as shell_persistent
from managed_tools.tools.shell import posture as shell_core

Action = Literal[
    "inspect", "list_dir", "read_text", "write_text", "append_text", "replace_text", "mkdir", "stat",
    "find_entries", "glob_entries", "grep_text", "run_command", "run_shell", "inspect_persistent_shell",
    "open_persistent_shell", "exec_persistent_shell", "close_persistent_shell", "wait_persistent_shell",
]  # fmt: skip
SHELL_ACTIONS = {
    "run_command": "bash",
    "run_shell": "shell_run",
    "inspect_persistent_shell": "shell_describe",
    "open_persistent_shell": "shell_open",
    "exec_persistent_shell": "shell_exec",
    "close_persistent_shell": "shell_close",
    "wait_persistent_shell": "shell_wait",
}
MAX_LIST = 1000


class PathInput(Arguments):
    path: file_tools.PathArg = "/workspace"


class AppendInput(Arguments):
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


async def _list_dir(ctx: ToolContext, args: PathInput) -> ListOutput:
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


async def _stat(ctx: ToolContext, args: PathInput) -> StatOutput:
    resolved = ctx.runtime.guard.resolve(args.path, "list")
    info = await anyio.to_thread.run_sync(files.lstat, resolved)
    if info is None:
        return StatOutput(path=resolved.virtual, exists=False, kind=None, size=None, modified_at=None)
    modified = datetime.fromtimestamp(info.st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return StatOutput(
        path=resolved.virtual, exists=True, kind=_kind(info.st_mode), size=info.st_size, modified_at=modified
    )


async def _mkdir(ctx: ToolContext, args: PathInput) -> MkdirOutput:
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


async def _inspect_shell(ctx: ToolContext, _: NoArguments) -> shell_core.ShellPosture:
    async with ctx.runtime.db.read() as tx:  # sandbox_execute keeps no transaction open (own_transactions)
        return await shell_core.posture(ctx.runtime, tx, ctx.session_id)


async def _inspect(ctx: ToolContext, _: NoArguments) -> DescribeOutput:
    return await sandbox_describe(ctx, NoArguments())


@dataclass(frozen=True)
class Route:
    model: type[Arguments]
    handler: Callable[[ToolContext, Any], Awaitable[BaseModel]]


ROUTES: dict[str, Route] = {
    "inspect": Route(NoArguments, _inspect),
    "list_dir": Route(PathInput, _list_dir),
    "read_text": Route(file_tools.ReadArgs, file_tools.read),
    "write_text": Route(file_tools.WriteArgs, file_tools.write),
    "append_text": Route(AppendInput, _append),
    "replace_text": Route(file_tools.EditArgs, file_tools.edit),
    "mkdir": Route(PathInput, _mkdir),
    "stat": Route(PathInput, _stat),
    "find_entries": Route(file_tools.GlobArgs, file_tools.glob),
    "glob_entries": Route(file_tools.GlobArgs, file_tools.glob),
    "grep_text": Route(file_tools.GrepArgs, file_tools.grep),
    "inspect_persistent_shell": Route(NoArguments, _inspect_shell),
    # The shell tools that need no approval; run_shell and exec_persistent_shell stay with shell_run and
    # shell_exec, whose always_ask must not be sidestepped through this door.
    "run_command": Route(shell_oneshot.BashInput, shell_oneshot.bash),
    "open_persistent_shell": Route(shell_persistent.OpenInput, shell_persistent.shell_open),
    "close_persistent_shell": Route(NoArguments, shell_persistent.shell_close),
    "wait_persistent_shell": Route(shell_history.WaitInput, shell_history.shell_wait),
}


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
        ActionView(name=name, input_fields=list(route.model.model_json_schema(by_alias=True).get("properties", {})),
                   routed_to=None)
        for name, route in ROUTES.items()
    ] + [ActionView(name=name, input_fields=[], routed_to=tool) for name, tool in SHELL_ACTIONS.items()
         if name not in ROUTES]  # fmt: skip
    return DescribeOutput(
        actions=actions,
        mounts=[m.model_dump(by_alias=True) for m in mounted_resources(ctx.runtime)],
        constraints=[
            "Paths are relative to /workspace or virtual (/workspace/..., /workspace/agent/..., /vaults/<name>/...).",
            "/workspace/agent is read-only here: stage, compare and promote to change it.",
            "Vaults only allow listing.",
            "Actions that run commands are the shell tools' (bash, shell_run, shell_exec...), not sandbox_execute's.",
        ],
        examples=[
            {"name": "read_text", "input": {"path": "README.md", "lineCount": 40}},
            {"name": "list_dir", "input": {"path": "/workspace"}},
        ],
        confinement=confinement_view(ctx.runtime),
    )


class ExecuteArgs(Arguments):
    name: Action
    input: dict[str, Any] = Field(default_factory=dict, description="The action's arguments (see sandbox_describe).")


class ExecuteOutput(WireModel):
    ok: bool
    name: str
    output: dict[str, Any]


async def sandbox_execute(ctx: ToolContext, args: ExecuteArgs) -> ExecuteOutput:
    if args.name in SHELL_ACTIONS and args.name not in ROUTES:
        raise ToolError(f"{args.name} runs commands: call {SHELL_ACTIONS[args.name]} instead (not sandbox_execute).")
    route = ROUTES[args.name]
    try:
        parsed = route.model.model_validate(args.input)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        raise ToolError(f"Invalid input for {args.name}: {where}: {first['msg']}.") from None
    output = await route.handler(ctx, parsed)
    return ExecuteOutput(ok=True, name=args.name, output=output.model_dump(mode="json", by_alias=True))


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
        description="Run one sandbox action by name (read_text, write_text, list_dir, grep_text, ...) through the "
        "same guarded code as the file tools.",
        input_model=ExecuteArgs,
        output_model=ExecuteOutput,
        handler=sandbox_execute,
        read_only=False,
        effects=("resource_read", "resource_write", "sandbox_execute"),
        max_argument_bytes=4 * file_tools.MAX_WRITE_CHARS + 4096,
        # Routed actions never use the call's transaction: file actions touch no table, and the shell ones
        # open short transactions of their own rather than hold the write lock while a process runs.
        own_transactions=True,
        examples=(ToolExample(description="List the workspace", input={"name": "list_dir", "input": {}}),),
    ),
)
