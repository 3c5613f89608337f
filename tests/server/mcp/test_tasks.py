"""Long calls as tasks (the io.modelcontextprotocol/tasks extension, 2026-07-28), through a real client that
declares the extension: a long shell_run followed and cancelled, a call waiting on a person, owner-bound ids."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from conftest import Connect, alive, data, gone
from mcp import Client, MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import ConfigDict, Field
from test_http import client as http_client
from test_http import serving

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.connection.attach import Attached, attach
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import approvals, tasks
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]
TASKS = "io.modelcontextprotocol/tasks"


class TaskCreated(types.Result):
    """What `tools/call` answers with when the server made the call a task."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str


class TasksExtension(ClientExtension):
    """The client side, declared on every request; a test drives tasks/get and tasks/cancel itself."""

    identifier = TASKS

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=self._unused)]

    async def _unused(self, created: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
        raise AssertionError("the tests call with allow_claimed=True and follow the task themselves")


class TaskRequest(types.Request[dict[str, Any], str]):
    name_param = "taskId"  # SEP-2663: tasks/* carry the task id in Mcp-Name


class _Any(types.Result):
    """tasks/get's and tasks/cancel's answers, kept whole."""

    model_config = ConfigDict(extra="allow")


async def get(client: Client, task_id: str) -> dict[str, Any]:
    result = await client.session.send_request(TaskRequest(method="tasks/get", params={"taskId": task_id}), _Any)
    return result.model_dump(by_alias=True, exclude_none=True)


async def cancel(client: Client, task_id: str) -> None:
    await client.session.send_request(TaskRequest(method="tasks/cancel", params={"taskId": task_id}), _Any)


async def start(client: Client, tool: str, args: dict[str, Any]) -> TaskCreated | types.CallToolResult:
    answer = await client.session.call_tool(tool, args, allow_claimed=True)
    assert isinstance(answer, TaskCreated | types.CallToolResult), answer
    return answer


async def until(client: Client, task_id: str, status: str, seconds: float = 20) -> dict[str, Any]:
    with anyio.fail_after(seconds):
        while (found := await get(client, task_id))["status"] != status:
            assert found["status"] == "working", found
            await anyio.sleep(0.1)
    return found


@pytest.fixture
async def allowed(workspace: Path, database_option: str | None) -> AsyncIterator[Runtime]:
    """shell_run pre-approved by the user's own configuration, so the calls run unasked."""
    config = ServeConfig.build(workspace=workspace, data_dir=None, database=database_option, allow=("shell_run",))
    async with open_runtime(config) as runtime:
        yield runtime


@asynccontextmanager
async def as_principal(runtime: Runtime, owner: str) -> AsyncIterator[Client]:
    """A client working in a session of another principal (as OAuth would attach it over HTTP)."""
    attachment = await attach(runtime, None, "memory", owner=owner)

    @asynccontextmanager
    async def attached() -> AsyncIterator[Attached]:
        yield Attached(attachment)

    server = build_server(runtime, transport="memory", attachments=attached)
    async with Client(server, extensions=[TasksExtension()]) as client:
        yield client


async def test_a_long_shell_run_is_followed_as_a_task_and_cancelled(allowed: Runtime, connect: Connect) -> None:
    marker = "sleep 30.4251"
    async with connect(allowed, extensions=[TasksExtension()]) as client:
        assert TASKS in (client.server_capabilities.extensions or {})
        created = await start(client, "shell_run", {"command": marker, "waitMs": 200})
        assert isinstance(created, TaskCreated) and created.status == "working"
        seen = await get(client, created.task_id)
        assert seen["status"] == "working" and "is running" in seen["statusMessage"]
        assert seen["pollIntervalMs"] > 0 and seen["resultType"] == "complete"
        assert alive(marker)
        async with as_principal(allowed, "oauth:someone-else") as stranger:
            for method in ("tasks/get", "tasks/cancel"):
                with pytest.raises(MCPError, match="Task not found") as refused:
                    await stranger.session.send_request(
                        TaskRequest(method=method, params={"taskId": created.task_id}), _Any
                    )
                assert refused.value.error.code == -32602
        assert (await get(client, created.task_id))["status"] == "working" and alive(marker)  # untouched
        await cancel(client, created.task_id)
        assert (await get(client, created.task_id))["status"] == "cancelled"
        assert await gone(marker, within=5)
        history = data(await client.call_tool("shell_history", {}))
        assert history["commands"][0]["status"] in ("killed", "cancelled", "error"), history["commands"][0]


async def test_a_finished_task_keeps_its_result_in_the_store(allowed: Runtime, connect: Connect) -> None:
    async with connect(allowed, extensions=[TasksExtension()]) as client:
        quick = await start(client, "shell_run", {"command": "echo at once", "waitMs": 5000})
        assert isinstance(quick, types.CallToolResult) and quick.structured_content is not None
        assert quick.structured_content["stdout"] == "at once\n"  # done within waitMs: no task
        created = await start(client, "shell_run", {"command": "sleep 1.5 && echo finished", "waitMs": 100})
        assert isinstance(created, TaskCreated)
        done = await until(client, created.task_id, "completed")
        assert done["result"]["structuredContent"]["stdout"] == "finished\n"
        assert done["result"]["structuredContent"]["status"] == "completed"
    async with allowed.db.read() as tx:  # kept durably, after the connection is gone
        kept = await tasks.get(tx, created.task_id)
    assert kept is not None and kept.status == "completed" and kept.reply == done["result"]


async def test_a_call_waiting_on_a_person_is_a_task_until_they_answer(runtime: Runtime, connect: Connect) -> None:
    """A client without elicitation: the task waits for `managed-tools approve`, then runs; a deny ends it."""
    async with connect(runtime, extensions=[TasksExtension()]) as client:
        created = await start(client, "shell_run", {"command": "echo approved"})
        assert isinstance(created, TaskCreated)
        waiting = await get(client, created.task_id)
        assert "managed-tools approve" in waiting["statusMessage"]
        request_id = waiting["statusMessage"].split("managed-tools approve ")[1].split(" ")[0]
        async with runtime.db.write() as tx:
            await approvals.decide(tx, request_id, approved=True, by="cli")
        done = await until(client, created.task_id, "completed")
        assert done["result"]["structuredContent"]["stdout"] == "approved\n"
        refused = await start(client, "shell_run", {"command": "echo never"})
        assert isinstance(refused, TaskCreated)
        request_id = (await get(client, refused.task_id))["statusMessage"].split("approve ")[1].split(" ")[0]
        async with runtime.db.write() as tx:
            await approvals.decide(tx, request_id, approved=False, by="cli", note="not today")
        denied = await until(client, refused.task_id, "completed")
        assert denied["result"]["isError"] is True
        assert "denied confirmation for shell_run: not today" in denied["result"]["content"][0]["text"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_no_task_for_a_client_that_did_not_declare_the_extension(
    allowed: Runtime, connect: Connect, mode: str
) -> None:
    async with connect(allowed, mode) as client:
        advertised = TASKS in (client.server_capabilities.extensions or {})
        assert advertised == (mode == "auto")  # the handshake era never hears of a 2026-07-28 extension
        ran = data(await client.call_tool("shell_run", {"command": "sleep 0.6 && echo late", "waitMs": 100}))
        assert ran["status"] == "running" and ran["commandId"]  # the handle, as always
        if mode == "auto":
            with pytest.raises(MCPError, match="Missing required client capability") as refused:
                await client.session.send_request(TaskRequest(method="tasks/get", params={"taskId": "x"}), _Any)
            assert refused.value.error.code == -32021
    async with connect(allowed, extensions=[TasksExtension()]) as client:
        with pytest.raises(MCPError, match="Task not found"):
            await get(client, "0" * 32)


@pytest.mark.sqlite_only(reason="the transport, not the store: the in-process tests cover both engines")
async def test_over_streamable_http_a_task_is_followed_and_cancelled(workspace: Path, tmp_path: Path) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data", allow=("shell_run",))
    marker = "sleep 30.4252"
    async with serving(config) as served, http_client(served, "auto", extensions=[TasksExtension()]) as client:
        created = await start(client, "shell_run", {"command": marker, "waitMs": 200})
        assert isinstance(created, TaskCreated)
        assert (await get(client, created.task_id))["status"] == "working" and alive(marker)
        await cancel(client, created.task_id)
        assert (await get(client, created.task_id))["status"] == "cancelled"
        assert await gone(marker, within=5)
        finished = await start(client, "shell_run", {"command": "sleep 1 && echo over http", "waitMs": 100})
        assert isinstance(finished, TaskCreated)
        done = await until(client, finished.task_id, "completed")
        assert done["result"]["structuredContent"]["stdout"] == "over http\n"


async def test_past_its_running_tasks_a_principal_is_answered_as_before(
    allowed: Runtime, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTTP edge's calls-at-once quota cannot see a task's work, so each principal has a cap of its own."""
    monkeypatch.setattr("managed_tools.server.mcp.tasks.MAX_LIVE_PER_PRINCIPAL", 1)
    async with connect(allowed, extensions=[TasksExtension()]) as client:
        first = await start(client, "shell_run", {"command": "sleep 30.4253", "waitMs": 100})
        assert isinstance(first, TaskCreated)
        second = await start(client, "shell_run", {"command": "sleep 0.5 && echo plain", "waitMs": 100})
        assert isinstance(second, types.CallToolResult) and second.structured_content is not None
        assert second.structured_content["status"] == "running"  # the handle, as for any client
        await cancel(client, first.task_id)
        assert await gone("sleep 30.4253", within=5)
