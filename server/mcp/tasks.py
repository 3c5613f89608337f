"""Long calls as tasks: the `io.modelcontextprotocol/tasks` extension of the 2026-07-28 protocol (SEP-2663).

The SDK does not ship it; it is built here on the SDK's extension points: the server advertises the extension
(`Server.extensions`, 2026-07-28 only), serves `tasks/get`, `tasks/update` and `tasks/cancel` as added request
methods, and answers a `tools/call` with `resultType: "task"` (a shape the SDK passes through as the extension's).

Only a client that declares the extension on the call gets a task, and only for calls that would otherwise
hold it or hand it a handle to chase:
- `shell_run` / `shell_exec` past their `waitMs`: the task follows the command to its end (`tasks/cancel` kills it);
- an always_ask call waiting on a person out of band (a client without elicitation): the task waits for
  `managed-tools approve` or `deny`, then runs the call (or reports the refusal);
- `session_run_child` running past a moment.
A client that can answer a question gets it first, by the input-required round, as the extension recommends: a
call becomes a task only once its questions are answered, so no task of ours waits on `tasks/update`.
Every task is a row in our store (stores/tasks.py) before its id is sent, its result is kept there, and it
belongs to its session's principal: another principal's task id is "not found", whether it exists or not.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from managed_tools.server.connection.attach import Attachments
from managed_tools.server.connection.ports import NoConsent, ports_for
from managed_tools.server.publishing.publish import Reply, to_wire_result
from managed_tools.stores import approvals, tasks
from managed_tools.stores.approvals import ApprovalRecord
from managed_tools.stores.errors import StoreError
from managed_tools.stores.tasks import TaskRecord
from managed_tools.tools.framework.calls.call_result import CallResult
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Attachment, Runtime
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.shell import posture

log = logging.getLogger("managed_tools.tasks")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
MISSING_CAPABILITY = -32021
INVALID_PARAMS = -32602
# The tools a task may stand for, and how long the call is held before it becomes one. A shell command answers by
# itself at `waitMs` (its `running` answer makes the task); a child run has no such bound.
TASK_TOOLS: dict[str, float] = {"shell_run": 60.0, "shell_exec": 60.0, "session_run_child": 1.0}
GRACE_SECONDS = 5.0  # any other always_ask call: it answers at once, or waits on a person
TTL_MS = 24 * 3600 * 1000
POLL_INTERVAL_MS = 1000
WATCH_SECONDS = 0.5  # how often a running task looks for a cancel made in another process, or a decision
FOLLOW_MS = 45_000  # each shell_wait of a followed command
# Tasks answer at once, so the HTTP edge's "calls at once" quota does not see their work: each principal may have
# this many running here; past it, a call is answered as for a client without the extension.
MAX_LIVE_PER_PRINCIPAL = 16


@dataclass(frozen=True)
class Answer:
    """A call's answer to the client, and our own result behind it (None for an input-required round)."""

    reply: Reply
    result: CallResult | None


RunCall = Callable[[ServerRequestContext[Attachments], types.CallToolRequestParams], Awaitable[Answer]]


class TaskIdParams(types.RequestParams):
    task_id: str = Field(alias="taskId", min_length=1, max_length=64)


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(alias="inputResponses")


def declared(ctx: ServerRequestContext[Any]) -> bool:
    """Did this request's client declare the extension (only a 2026-07-28 request can)?"""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    caps = ctx.session.client_capabilities
    return caps is not None and TASKS_EXTENSION in (caps.extensions or {})


def wanted(ctx: ServerRequestContext[Any], definition: ToolDefinition | None) -> bool:
    """A call of a long tool, or one that may wait on a person, by a client following tasks."""
    if definition is None or not (definition.name in TASK_TOOLS or definition.permission_policy == "always_ask"):
        return False
    return declared(ctx)


def _task_view(record: TaskRecord) -> dict[str, Any]:
    """The extension's `DetailedTask`: the task, and its result, error or input requests by status."""
    view: dict[str, Any] = {
        "taskId": record.id,
        "status": record.status,
        "createdAt": record.created_at,
        "lastUpdatedAt": record.updated_at,
        "ttlMs": record.ttl_ms,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if record.status_message:
        view["statusMessage"] = record.status_message
    if record.status == "completed" and record.reply is not None:
        view["result"] = record.reply
    elif record.status == "failed":
        view["error"] = record.error or {"code": -32603, "message": record.status_message or "The task failed."}
    return view


@dataclass
class _Flight:
    """One call running in the background: its answer goes to the waiting request until it becomes a task, to
    the task's row after."""

    attachment: Attachment
    tool_name: str
    task_id: str | None = None
    response: Any = None
    settled: anyio.Event = field(default_factory=anyio.Event)
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    command_id: str | None = None  # the shell command a task follows, killed when it is cancelled
    scope: anyio.CancelScope | None = None  # the background work's


class Tasks:
    """The tasks of this server process: their background work, and the extension's methods."""

    def __init__(self, runtime: Runtime, run: RunCall) -> None:
        self._runtime = runtime
        self._run = run
        self._group: TaskGroup | None = None
        self._live: dict[str, _Flight] = {}  # the tasks whose work runs in this process

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Where background work lives (the server's lifespan); when it ends, unfinished tasks fail, recorded."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                group.cancel_scope.cancel()

    # ---- tools/call -----------------------------------------------------------------------------------

    async def offload(self, ctx: ServerRequestContext[Attachments], params: types.CallToolRequestParams) -> Reply:
        """Run the call in the background; answer with its result if it comes in time, else with a task (a
        `resultType: "task"` mapping, typed as the call's answer: the SDK sends an extension's shape as it is)."""
        attachment = await ctx.lifespan_context.resolve(ctx)
        running = sum(flight.attachment.owner == attachment.owner for flight in self._live.values())
        if self._group is None or running >= MAX_LIVE_PER_PRINCIPAL:  # the call as it always was
            return (await self._run(ctx, params)).reply
        flight = _Flight(attachment, params.name)
        self._group.start_soon(self._work, flight, ctx, params)
        try:
            with anyio.move_on_after(TASK_TOOLS.get(params.name, GRACE_SECONDS)):
                await flight.settled.wait()
            await self._make_task(flight, f"{params.name} is running.", restate=False)
        finally:
            if flight.task_id is None and not flight.settled.is_set() and flight.scope is not None:
                flight.scope.cancel()  # the client gave up on the call before it became a task: so does the work
        if isinstance(flight.response, Exception):
            raise flight.response
        return cast(Reply, flight.response)

    async def _make_task(self, flight: _Flight, message: str, *, restate: bool = True) -> None:
        """Make the call a task now, unless it has answered already; a task that exists says `message` now
        (`restate`: the work moved on, to a command or a person)."""
        async with flight.lock:
            if flight.settled.is_set():
                if flight.task_id is not None and restate:
                    await self._set(flight.task_id, "working", message=message)
                return
            async with self._runtime.db.write() as tx:
                record = await tasks.create(
                    tx, flight.attachment.session_id, tool_name=flight.tool_name, status_message=message, ttl_ms=TTL_MS
                )
            flight.task_id = record.id
            self._live[record.id] = flight
            flight.response = {"resultType": "task", **_task_view(record)}
            flight.settled.set()

    async def _deliver(self, flight: _Flight, reply: Reply) -> None:
        async with flight.lock:
            if flight.task_id is None:
                flight.response = reply
                flight.settled.set()
                return
        if isinstance(reply, types.InputRequiredResult):  # a question only a retried call could carry
            error = {"code": -32603, "message": "The call needs the client's answer; call the tool again."}
            await self._set(flight.task_id, "failed", message=error["message"], error=error)
        else:
            await self._set(flight.task_id, "completed", reply=reply)

    async def _set(self, task_id: str, status: tasks.TaskStatus, **values: Any) -> bool:
        with anyio.CancelScope(shield=True):  # what a task came to is recorded even as the server stops
            async with self._runtime.db.write() as tx:
                changed = await tasks.update(tx, task_id, status, **values)
        return changed

    async def _work(
        self, flight: _Flight, ctx: ServerRequestContext[Attachments], params: types.CallToolRequestParams
    ) -> None:
        ended = False
        with anyio.CancelScope() as scope:
            flight.scope = scope
            if flight.task_id is not None:
                self._live[flight.task_id] = flight
            try:
                reply: Reply | None = None
                failure: Exception | None = None
                async with anyio.create_task_group() as watch:
                    watch.start_soon(self._watch_cancel, flight, scope)
                    try:
                        reply = await self._carry(flight, ctx, params)
                    except Exception as exc:  # kept apart from the task group's own errors
                        failure = exc
                    watch.cancel_scope.cancel()
                if reply is not None:
                    await self._deliver(flight, reply)
                else:
                    assert failure is not None
                    await self._fail(flight, params.name, failure)
                ended = True
            finally:
                if flight.task_id is not None:
                    self._live.pop(flight.task_id, None)
                if not ended:  # cancelled (tasks/cancel marked it already) or the server stopping
                    self._kill(flight)
                    if flight.task_id is not None:
                        await self._set(flight.task_id, "failed", message="The server stopped before the task "
                                        "ended; call the tool again.")  # fmt: skip

    async def _fail(self, flight: _Flight, name: str, exc: Exception) -> None:
        """The call failed at the protocol level: the waiting request gets the error, or the task fails with it."""
        log.warning("task for %s failed: %s", name, exc)
        error = {"code": exc.code, "message": exc.message} if isinstance(exc, MCPError) else {
            "code": -32603, "message": f"{name} failed: {type(exc).__name__}"}  # fmt: skip
        async with flight.lock:
            if flight.task_id is None:
                flight.response = exc
                flight.settled.set()
                return
        await self._set(flight.task_id, "failed", message=error["message"], error=error)

    async def _carry(
        self, flight: _Flight, ctx: ServerRequestContext[Attachments], params: types.CallToolRequestParams
    ) -> Reply:
        """The call, then what it still waits for: a shell command past `waitMs` followed to its end; a person's
        out-of-band decision, then the call again."""
        answer = await self._run(ctx, params)
        while answer.result is not None:
            result = answer.result
            running = result.structured or {}
            action = result.action_required or {}
            if result.status == "success" and running.get("status") == "running" and "commandId" in running:
                flight.command_id = str(running["commandId"])
                await self._make_task(flight, f"Command {flight.command_id} is running.")
                answer = await self._follow(ctx, flight)
            elif result.error_kind == "permission" and isinstance(action.get("requestId"), str):
                request_id = action["requestId"]
                await self._make_task(flight, f"Waiting for a person: managed-tools approve {request_id} (or deny).")
                decided = await self._decided(request_id)
                if decided.status != "approved":  # asking again would only wait again: the refusal is the answer
                    note = f": {decided.note}" if decided.note else ""
                    refused = CallResult("blocked", f"The user denied confirmation for {params.name}{note}.",
                                         error_kind="permission")  # fmt: skip
                    return to_wire_result(refused)
                answer = await self._run(ctx, params)
            else:
                break
        return answer.reply

    async def _follow(self, ctx: ServerRequestContext[Attachments], flight: _Flight) -> Answer:
        assert flight.command_id is not None
        while True:
            result = await execute(self._runtime, flight.attachment, ports_for(ctx, NoConsent()), "shell_wait",
                                   {"commandId": flight.command_id, "timeoutMs": FOLLOW_MS})  # fmt: skip
            waited = result.structured or {}
            if result.is_error or waited.get("state") != "running":
                break
        command = waited.get("command")
        if result.is_error or not isinstance(command, dict):
            return Answer(to_wire_result(result), result)
        final = CallResult("success", json.dumps(command, ensure_ascii=False), structured=command)
        return Answer(to_wire_result(final), final)

    async def _decided(self, request_id: str) -> ApprovalRecord:
        """The request once a person has answered it (`managed-tools approve` or `deny`, from any process)."""
        while True:
            async with self._runtime.db.read() as tx:
                record = await approvals.get(tx, request_id)
            if record.status != "pending":
                return record
            await anyio.sleep(WATCH_SECONDS)

    async def _watch_cancel(self, flight: _Flight, scope: anyio.CancelScope) -> None:
        """A cancel may come through another process sharing the store: its row says so."""
        while True:
            await anyio.sleep(WATCH_SECONDS)
            if flight.task_id is None:
                continue
            try:
                async with self._runtime.db.read() as tx:
                    record = await tasks.get(tx, flight.task_id)
            except StoreError:
                continue
            if record is not None and record.status == "cancelled":
                scope.cancel()
                return

    def _kill(self, flight: _Flight) -> None:
        if flight.command_id is not None:
            job = posture.live_job(self._runtime, flight.attachment.session_id, flight.command_id)
            if job is not None:
                job.kill()

    # ---- tasks/get, tasks/update, tasks/cancel ----------------------------------------------------------

    async def _owned(self, ctx: ServerRequestContext[Attachments], task_id: str) -> TaskRecord:
        if not declared(ctx):
            raise MCPError(
                code=MISSING_CAPABILITY,
                message="Missing required client capability",
                data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
        attachment = await ctx.lifespan_context.resolve(ctx)
        try:
            async with self._runtime.db.read() as tx:
                return await tasks.get_owned(tx, task_id, self._runtime.environment.agent_id, owner=attachment.owner)
        except StoreError:
            raise MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found") from None

    async def get(self, ctx: ServerRequestContext[Attachments], params: TaskIdParams) -> dict[str, Any]:
        return _task_view(await self._owned(ctx, params.task_id))

    async def cancel(self, ctx: ServerRequestContext[Attachments], params: TaskIdParams) -> dict[str, Any]:
        record = await self._owned(ctx, params.task_id)
        if await self._set(record.id, "cancelled", message="Cancelled by the client."):
            live = self._live.get(record.id)
            if live is not None and live.scope is not None:
                live.scope.cancel()  # here: at once; in another process, its watcher sees the row
        return {}

    async def update(self, ctx: ServerRequestContext[Attachments], params: UpdateTaskParams) -> dict[str, Any]:
        """Acknowledged and ignored, as the extension asks for keys not outstanding: our tasks never wait on an
        input request (a question is asked before a call becomes a task, by the input-required round)."""
        await self._owned(ctx, params.task_id)
        return {}


def serve(server: Server[Attachments], runtime: Runtime, run: RunCall) -> Tasks:
    """The extension on `server`: advertised to 2026-07-28 clients, its methods beside the core ones."""
    found = Tasks(runtime, run)
    server.extensions[TASKS_EXTENSION] = {}
    server.add_request_handler("tasks/get", TaskIdParams, found.get)
    server.add_request_handler("tasks/update", UpdateTaskParams, found.update)
    server.add_request_handler("tasks/cancel", TaskIdParams, found.cancel)
    return found
