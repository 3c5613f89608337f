"""Delegation: child sessions seeded with a task, their lineage, and running a child either through the client's
model (sampling with tools, handshake era) or by handing it to a second client attached to the child."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, error_text, runtime_with
from mcp.client import ClientRequestContext
from test_http import client as http_client
from test_http import serving
from test_stdio import stdio_client

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.stores import events, sessions
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import NoArguments, WireModel

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

TOOLS_WITH_TOOLS = types.SamplingCapability(tools=types.SamplingToolsCapability())


class Done(WireModel):
    done: bool


async def launch(ctx: ToolContext, _: NoArguments) -> Done:
    await events.append_event(ctx.tx, ctx.session_id, ctx.wake_id, "probe.launched", {})
    return Done(done=True)


LAUNCH = ToolDefinition(
    name="launch_probe",
    title="Launch",
    description="Test tool: an always_ask write.",
    input_model=NoArguments,
    output_model=Done,
    handler=launch,
    read_only=False,
    permission_policy="always_ask",
)


@pytest.fixture
async def rt(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with runtime_with(config, LAUNCH) as runtime:
        yield runtime


async def child_events(rt: Runtime, child: str) -> list[dict[str, Any]]:
    async with rt.db.read() as tx:
        rows = await tx.fetchall(
            "SELECT type, processed, payload FROM events WHERE session_id = ? ORDER BY seq", (child,)
        )
    return [dict(row) for row in rows]


@pytest.mark.parametrize("mode", ERAS)
async def test_delegate_creates_a_seeded_child_that_lineage_reaches(rt: Runtime, connect: Connect, mode: str) -> None:
    async with connect(rt, mode) as client:
        made = data(
            await client.call_tool(
                "session_delegate",
                {
                    "name": "counter",
                    "task": "Count the files",
                    "title": "Files counted",
                    "successCriteria": ["a number", "a number"],
                    "planSteps": ["list", "count"],
                },
            )
        )
        child = made["childSession"]
        assert child["parentSessionId"] == made["parentSessionId"]
        assert child["relationToCurrent"] == "child" and child["activeOutcomeTitle"] == "Files counted"
        assert child["tags"] == ["name:counter"]
        assert len(made["seededEventIds"]) == 3
        listed = data(await client.call_tool("session_list_children", {}))
        assert [s["sessionId"] for s in listed["sessions"]] == [child["sessionId"]]
        lineage = data(await client.call_tool("session_list", {"lineage": "children"}))
        assert [s["sessionId"] for s in lineage["sessions"]] == [child["sessionId"]]
        parent = data(await client.call_tool("session_get_snapshot", {}))
        assert parent["childCount"] == 1
        found = data(await client.call_tool("session_search_context", {"query": "Count files", "lineage": "children"}))
        assert {h["sessionId"] for h in found["hits"]} == {child["sessionId"]}
    async with rt.db.read() as tx:
        row = await sessions.get_session(tx, child["sessionId"])
    assert row.parent_id == made["parentSessionId"] and row.agent_id == rt.environment.agent_id
    seeded = await child_events(rt, child["sessionId"])
    assert [(e["type"], e["processed"]) for e in seeded] == [
        ("user.define_outcome", 0),
        ("user.plan", 0),
        ("user.message", 0),
    ]


async def test_other_agents_and_non_children_are_refused(rt: Runtime, connect: Connect) -> None:
    async with rt.db.write() as tx:
        foreign = await sessions.create_session(tx, "someone-else")
        foreign_child = await sessions.create_session(tx, "someone-else", parent_id=foreign.id)
        stranger = await sessions.create_session(tx, rt.environment.agent_id)
    async with connect(rt) as client:
        me = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        for target in (foreign.id, foreign_child.id):
            assert "is not available to agent" in error_text(
                await client.call_tool("session_list_children", {"sessionId": target})
            )
            assert "is not available to agent" in error_text(
                await client.call_tool("session_run_child", {"sessionId": target, "waitSeconds": 0})
            )
        assert "is not a direct child" in error_text(
            await client.call_tool("session_run_child", {"sessionId": stranger.id, "waitSeconds": 0})
        )
        assert "cannot run itself" in error_text(
            await client.call_tool("session_run_child", {"sessionId": me, "waitSeconds": 0})
        )
        assert "less than or equal to 10" in error_text(
            await client.call_tool("session_run_child", {"sessionId": stranger.id, "cycles": 11})
        )


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> types.CreateMessageResultWithTools:
    return types.CreateMessageResultWithTools(
        role="assistant",
        content=[types.ToolUseContent(type="tool_use", id=call_id, name=name, input=arguments)],
        model="scripted",
        stop_reason="toolUse",
    )


async def test_sampling_runs_child_tools_through_the_executor(rt: Runtime, connect: Connect) -> None:
    seen: list[types.CreateMessageRequestParams] = []
    script = [
        tool_use("1", "planning_setup_plan", {"objective": "count", "initialSteps": ["list"]}),
        types.CreateMessageResultWithTools(
            role="assistant",
            content=[
                types.ToolUseContent(type="tool_use", id="2", name="planning_add_step", input={"steps": ["count"]}),
                types.ToolUseContent(type="tool_use", id="2b", name="session_delegate", input={"task": "nested"}),
            ],
            model="scripted",
        ),
        tool_use("3", "planning_add_step", {"steps": ["never"]}),
    ]

    async def scripted(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResultWithTools:
        seen.append(params)
        return script[len(seen) - 1]

    async with connect(rt, "legacy", sampling_callback=scripted, sampling_capabilities=TOOLS_WITH_TOOLS) as client:
        child = data(await client.call_tool("session_delegate", {"name": "worker", "task": "Plan the count"}))[
            "childSession"
        ]
        ran = data(await client.call_tool("session_run_child", {"sessionId": child["sessionId"], "cycles": 2}))
    assert ran["mode"] == "sampling" and ran["executedCycles"] == 2 and ran["loopStopReason"] == "max_cycles"
    assert [(c["toolName"], c["status"]) for c in ran["toolCalls"]] == [
        ("planning_setup_plan", "success"),
        ("planning_add_step", "success"),
        ("session_delegate", "error"),  # one level only: named anyway, refused
    ]
    assert len(seen) == 2  # stopped at `cycles`: the third scripted turn was never asked for
    first = seen[0]
    assert first.tools is not None and "session_run_child" not in {t.name for t in first.tools}
    assert isinstance(first.messages[0].content, list)
    # The second request carried the first call's result back to the model.
    answer = seen[1].messages[-1].content
    assert isinstance(answer, list) and isinstance(answer[0], types.ToolResultContent)
    logged = await child_events(rt, child["sessionId"])
    assert [e["type"] for e in logged].count("span.completed") == 3  # two tools and the wake
    assert all(e["processed"] == 1 for e in logged)
    async with rt.db.read() as tx:
        steps = await tx.fetchall(
            "SELECT title FROM plan_steps WHERE session_id = ? ORDER BY step_id", (child["sessionId"],)
        )
        grandchildren = await sessions.list_children(
            tx, rt.environment.agent_id, child["sessionId"], owner=sessions.LOCAL_OWNER
        )
    assert [s["title"] for s in steps] == ["list", "count"]
    assert grandchildren == []


async def test_a_narrowed_child_is_sent_only_its_tools_and_cannot_call_outside_them(
    rt: Runtime, connect: Connect, workspace: Path
) -> None:
    """Issue 38, item 15: `tools`/`toolsets` narrow what the child's model is sent, and the model that names a
    tool outside them anyway, directly, through sandbox_execute's route or in a later run, is refused as unknown."""
    seen: list[types.CreateMessageRequestParams] = []
    script = [
        tool_use("1", "write", {"path": "direct.txt", "content": "x"}),
        tool_use("2", "sandbox_execute", {"name": "write_text", "input": {"path": "routed.txt", "content": "x"}}),
        tool_use("3", "planning_setup_plan", {"objective": "count", "initialSteps": ["list"]}),
        tool_use("4", "write", {"path": "later.txt", "content": "x"}),
    ]

    async def scripted(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResultWithTools:
        seen.append(params)
        return script[len(seen) - 1]

    narrowing = {"tools": ["read", "sandbox_execute"], "toolsets": ["planning"]}
    async with connect(rt, "legacy", sampling_callback=scripted, sampling_capabilities=TOOLS_WITH_TOOLS) as client:
        child = data(await client.call_tool("session_delegate", {"name": "w", "task": "Plan", **narrowing}))
        child_id = child["childSession"]["sessionId"]
        ran = data(await client.call_tool("session_run_child", {"sessionId": child_id, "cycles": 3}))
        again = data(await client.call_tool("session_run_child", {"sessionId": child_id, "cycles": 1}))
        unknown = error_text(await client.call_tool("session_delegate", {"name": "x", "task": "t", "tools": ["nope"]}))
        nested = await client.call_tool("session_delegate", {"name": "x", "task": "t", "tools": ["session_delegate"]})
        no_set = error_text(await client.call_tool("session_delegate", {"name": "x", "task": "t", "toolsets": ["no"]}))
    planning = ["planning_setup_plan", "planning_add_step", "planning_update_step", "planning_read_plan"]
    assert [t.name for t in seen[0].tools or []] == [*planning, "read", "sandbox_execute"]  # catalogue order
    assert all({t.name for t in params.tools or []} == {t.name for t in seen[0].tools or []} for params in seen)
    calls = [(c["toolName"], c["status"], c["errorKind"]) for c in ran["toolCalls"] + again["toolCalls"]]
    assert calls[0] == ("write", "error", "unknown_tool") and calls[3] == ("write", "error", "unknown_tool")
    assert calls[1][:2] == ("sandbox_execute", "error") and calls[2] == ("planning_setup_plan", "success", None)
    routed = seen[2].messages[-1].content
    assert isinstance(routed, list) and isinstance(routed[0], types.ToolResultContent)
    assert "write_text runs as write, which this caller's access does not include" in str(routed[0].content)
    assert not any((workspace / name).exists() for name in ("direct.txt", "routed.txt", "later.txt"))
    assert "cannot be given 'nope'" in unknown and "Unknown toolset 'no'" in no_set
    assert nested.is_error and "session_delegate" in error_text(nested)


async def test_an_always_ask_tool_in_the_child_pauses_for_a_person(rt: Runtime, connect: Connect) -> None:
    async def scripted(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResultWithTools:
        return tool_use("1", "launch_probe", {})

    async with connect(rt, "legacy", sampling_callback=scripted, sampling_capabilities=TOOLS_WITH_TOOLS) as client:
        child = data(await client.call_tool("session_delegate", {"name": "worker", "task": "Launch"}))["childSession"][
            "sessionId"
        ]
        ran = data(await client.call_tool("session_run_child", {"sessionId": child, "cycles": 3}))
    assert ran["loopStopReason"] == "requires_action" and ran["executedCycles"] == 1
    (call,) = ran["toolCalls"]
    assert call["status"] == "blocked" and call["errorKind"] == "permission" and call["requestId"]
    assert ran["childSession"]["status"] == "requires_action"
    async with rt.db.read() as tx:
        assert await tx.scalar("SELECT COUNT(*) FROM events WHERE type = 'probe.launched'") == 0
        request = await tx.fetchone("SELECT session_id, status FROM approvals WHERE id = ?", (call["requestId"],))
    assert request is not None and dict(request) == {"session_id": child, "status": "pending"}


@pytest.mark.parametrize("mode", ERAS)
async def test_without_sampling_the_child_is_handed_to_a_second_client(
    rt: Runtime, connect: Connect, mode: str
) -> None:
    async with connect(rt, mode) as parent:
        child = data(await parent.call_tool("session_delegate", {"name": "worker", "task": "Plan it"}))["childSession"][
            "sessionId"
        ]
        idle = data(await parent.call_tool("session_run_child", {"sessionId": child, "waitSeconds": 0.3}))
        assert idle["mode"] == "handoff" and idle["loopStopReason"] == "no_progress" and idle["executedCycles"] == 0
        assert idle["howToWork"]["stdio"] == f"managed-tools serve --session {child}"
        assert idle["howToWork"]["httpHeader"] == f"Mcp-Managed-Session: {child}"
        results: dict[str, Any] = {}

        async def run() -> None:
            results["ran"] = data(await parent.call_tool("session_run_child", {"sessionId": child, "waitSeconds": 20}))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await anyio.sleep(0.3)
            async with connect(rt, mode, session_id=child) as worker:
                data(await worker.call_tool("planning_setup_plan", {"objective": "it"}))
    ran = results["ran"]
    assert ran["loopStopReason"] == "progress" and ran["newEventCount"] > 0
    assert ran["childSession"]["sessionId"] == child


@pytest.mark.parametrize("mode", ERAS)
async def test_a_hand_off_child_worked_by_an_attached_client_reports_and_answers(
    rt: Runtime, connect: Connect, mode: str
) -> None:
    """Issue 38 item 7: calls the attached client made before the parent looks are progress (not no_progress),
    and the client answers the parent (session_answer_parent): a response, and the implicit completion."""
    async with connect(rt, mode) as parent:
        delegated = data(
            await parent.call_tool(
                "session_delegate", {"name": "worker", "task": "Plan it", "parentCommunication": "implicit"}
            )
        )
        child = delegated["childSession"]["sessionId"]
        async with connect(rt, mode, session_id=child) as worker:
            data(await worker.call_tool("planning_setup_plan", {"objective": "it"}))
        worked = data(await parent.call_tool("session_run_child", {"sessionId": child, "waitSeconds": 0}))
        idle = data(await parent.call_tool("session_run_child", {"sessionId": child, "waitSeconds": 0}))
        async with connect(rt, mode, session_id=child) as worker:
            answered = data(await worker.call_tool("session_answer_parent", {"text": "planned: 3 steps"}))
        done = data(await parent.call_tool("session_run_child", {"sessionId": child, "waitSeconds": 0}))
        own = await parent.call_tool("session_answer_parent", {"text": "nobody asked"})
        parent_id = data(await parent.call_tool("session_get_snapshot", {}))["sessionId"]
    assert worked["loopStopReason"] == "progress"  # the work happened before this call: it still counts
    assert idle["loopStopReason"] == "no_progress"  # nothing new since the parent last looked
    assert answered["parentSessionId"] == parent_id and answered["queuedToParent"] is True
    assert done["loopStopReason"] == "idle" and done["response"] == "planned: 3 steps"
    assert own.is_error and "was not delegated" in error_text(own)
    async with rt.db.read() as tx:
        queued = await tx.fetchall(
            "SELECT payload FROM events WHERE session_id = ? AND type = 'session.child_completed'", (parent_id,)
        )
    assert len(queued) == 1 and json.loads(queued[0]["payload"])["response"] == "planned: 3 steps"


async def test_a_person_approving_through_elicitation_lets_the_child_go_on(rt: Runtime, connect: Connect) -> None:
    script = [
        tool_use("1", "launch_probe", {}),
        types.CreateMessageResultWithTools(
            role="assistant", content=[types.TextContent(type="text", text="launched")], model="scripted"
        ),
    ]
    asked: list[str] = []

    async def scripted(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResultWithTools:
        return script[len(params.messages) // 2]

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with connect(
        rt, "legacy", sampling_callback=scripted, sampling_capabilities=TOOLS_WITH_TOOLS, elicitation_callback=person
    ) as client:
        child = data(await client.call_tool("session_delegate", {"name": "worker", "task": "Launch"}))["childSession"][
            "sessionId"
        ]
        ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
    assert ran["loopStopReason"] == "idle" and ran["executedCycles"] == 2 and ran["response"] == "launched"
    assert [(c["toolName"], c["status"]) for c in ran["toolCalls"]] == [("launch_probe", "success")]
    assert len(asked) == 1 and "launch_probe" in asked[0]
    # Issue 38 item 6: the person reads whose call it is and that a headless model, not their client, made it.
    first_line = asked[0].split("\n")[0]
    assert f"session {child} (worker)" in first_line and "a child delegated by session" in first_line
    assert "run headless by the client's model (sampling)" in first_line
    async with rt.db.read() as tx:
        stored = await tx.scalar("SELECT question FROM approvals")
        launched = await tx.fetchall("SELECT session_id FROM events WHERE type = 'probe.launched'")
        decided = await tx.fetchall("SELECT session_id, status FROM approvals")
    assert [r["session_id"] for r in launched] == [child]
    assert [(r["session_id"], r["status"]) for r in decided] == [(child, "consumed")]
    assert stored == asked[0]  # the CLI shows the same question


async def test_the_hand_off_over_stdio_with_serve_session_child(workspace: Path) -> None:
    """The tool's own instructions, followed literally: a second server process attached to the child."""
    async with stdio_client(workspace, mode="legacy") as parent:
        child = data(await parent.call_tool("session_delegate", {"name": "worker", "task": "Plan it"}))["childSession"][
            "sessionId"
        ]
        results: dict[str, Any] = {}

        async def run() -> None:
            results["ran"] = data(await parent.call_tool("session_run_child", {"sessionId": child, "waitSeconds": 60}))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            command = (await _how_to_work(parent, child))["stdio"].split()
            assert command[:3] == ["managed-tools", "serve", "--session"]
            async with stdio_client(workspace, *command[2:]) as worker:
                data(await worker.call_tool("planning_setup_plan", {"objective": "it"}))
    assert results["ran"]["loopStopReason"] == "progress" and results["ran"]["mode"] == "handoff"


async def _how_to_work(client: Any, child: str) -> dict[str, Any]:
    quick = data(await client.call_tool("session_run_child", {"sessionId": child, "waitSeconds": 0}))
    how: dict[str, Any] = quick["howToWork"]
    return how


async def test_a_client_model_that_fails_stops_the_run_and_says_so(rt: Runtime, connect: Connect) -> None:
    async def refuses(context: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.ErrorData:
        return types.ErrorData(code=-1, message="the user declined sampling")

    async with connect(rt, "legacy", sampling_callback=refuses, sampling_capabilities=TOOLS_WITH_TOOLS) as client:
        child = data(await client.call_tool("session_delegate", {"name": "worker", "task": "Anything"}))[
            "childSession"
        ]["sessionId"]
        ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
    assert ran["loopStopReason"] == "model_error" and ran["executedCycles"] == 0 and ran["toolCalls"] == []
    assert ran["response"] == "The client's model did not answer: the user declined sampling"


@pytest.mark.parametrize("mode", ERAS)
async def test_the_hand_off_over_http_with_the_session_header(config: ServeConfig, mode: str) -> None:
    async with serving(config) as served, http_client(served, mode) as parent:
        child = data(await parent.call_tool("session_delegate", {"name": "worker", "task": "Plan it"}))["childSession"][
            "sessionId"
        ]
        name, value = (await _how_to_work(parent, child))["httpHeader"].split(": ")
        results: dict[str, Any] = {}

        async def run() -> None:
            results["ran"] = data(await parent.call_tool("session_run_child", {"sessionId": child, "waitSeconds": 30}))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await anyio.sleep(0.3)
            async with http_client(served, mode, headers={name: value}) as worker:
                assert data(await worker.call_tool("session_get_snapshot", {}))["sessionId"] == child
    assert results["ran"]["loopStopReason"] == "progress" and results["ran"]["newEventCount"] > 0
