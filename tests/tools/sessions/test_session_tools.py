"""The first tools over a real in-process MCP client, in both protocol eras, on a real SQLite file."""

from __future__ import annotations

import pytest
from conftest import ERAS, Connect, data, error_text

from managed_tools.stores import sessions
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_list_publishes_schemas_annotations_and_meta(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        listing = await client.list_tools()
    tools = {tool.name: tool for tool in listing.tools}
    assert set(tools) == set(runtime.registry.names())
    for tool in tools.values():
        assert tool.title and tool.description
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.annotations is not None
        meta = (tool.meta or {})["managed-tools/tool"]
        shell = tool.name in ("shell_run", "shell_exec")
        assert tool.annotations.title is None  # the tool's own title, not repeated
        assert tool.annotations.destructive_hint is (shell if tool.annotations.read_only_hint is False else None)
        assert tool.annotations.open_world_hint is shell  # a shell reaches out
        # only what differs from the defaults (managed, always_allow, block); read-only is the annotation's
        assert set(meta) <= {"permissionPolicy", "effects", "interruptBehavior", "examples"} and meta["effects"]
        asks = tool.name in ("memory_promote_note", "memory_correct", "resources_promote_to_substrate",
                             "resources_restore_version", "shell_run", "shell_exec")  # fmt: skip
        assert meta.get("permissionPolicy", "always_allow") == ("always_ask" if asks else "always_allow")
    # the executor refuses an extra field by name; publishing that costs every model's context (the catalogue budget)
    assert "additionalProperties" not in tools["session_get_events"].input_schema
    events_meta = tools["session_get_events"].meta or {}
    assert events_meta["managed-tools/tool"]["examples"][0]["input"]["limit"] == 5


@pytest.mark.parametrize("mode", ERAS)
async def test_environment_describe(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        env = data(await client.call_tool("environment_describe", {}))
    assert env["agentId"] == "default"
    assert env["kind"] == "local"
    assert [m["mountPath"] for m in env["mountedResources"]] == ["/workspace", "/workspace/agent"]
    assert len(env["fingerprint"]) == 64 and len(env["agentSetupFingerprint"]) == 64
    # Host paths stay private: the model works with virtual paths only.
    assert str(runtime.environment.workspace) not in str(env)


async def test_environment_describe_follows_the_live_setup(runtime: Runtime, connect: Connect) -> None:
    """Its answer is built once per setup contract: a skill coming changes it, a part asked for leaves it whole."""
    async with connect(runtime) as client:
        before = data(await client.call_tool("environment_describe", {}))
        part = data(await client.call_tool("environment_describe", {"sections": ["confinement"]}))
        again = data(await client.call_tool("environment_describe", {}))
        skill = runtime.environment.workspace / ".agents/skills/new/SKILL.md"
        skill.parent.mkdir(parents=True)
        skill.write_text('---\nname: new\ndescription: "A new skill."\n---\n# New\n', encoding="utf-8")
        assert runtime.skills.reload()
        after = data(await client.call_tool("environment_describe", {}))
    assert again == before and set(part) == {"id", "agentId", "fingerprint", "confinement"}
    assert before["agentSetupFingerprint"] != after["agentSetupFingerprint"] == setup_fingerprint(runtime)
    assert {k: v for k, v in after.items() if k != "agentSetupFingerprint"} == {
        k: v for k, v in before.items() if k != "agentSetupFingerprint"
    }


@pytest.mark.parametrize("mode", ERAS)
async def test_every_call_is_recorded_as_span_events(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        await client.call_tool("environment_describe", {})
        await client.call_tool("no_such_tool", {})
        await client.call_tool("session_list", {"limit": "many"})
        got = data(await client.call_tool("session_get_events", {"limit": 50}))
    types = [(e["type"], e["payload"].get("spanKind"), e["payload"].get("toolName")) for e in got["events"]]
    assert types[0] == ("span.started", "wake", None)
    tool_spans = [t for t in types if t[1] == "tool"]
    assert tool_spans == [
        ("span.started", "tool", "environment_describe"),
        ("span.completed", "tool", "environment_describe"),
        ("span.started", "tool", "no_such_tool"),
        ("span.completed", "tool", "no_such_tool"),
        ("span.started", "tool", "session_list"),
        ("span.completed", "tool", "session_list"),
    ]  # session_get_events's own record (both events) is written after it read (one round trip per call)
    results = [e["payload"]["result"] for e in got["events"] if e["type"] == "span.completed"]
    assert results == ["success", "error", "error"]


async def test_session_get_snapshot_and_traces(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        snap = data(await client.call_tool("session_get_snapshot", {}))
        traces = data(await client.call_tool("session_list_traces", {}))
        wake = traces["traces"][0]["wakeId"]
        trace = data(await client.call_tool("session_get_trace", {"wakeId": wake, "types": ["span.completed"]}))
        missing = await client.call_tool("session_get_trace", {"wakeId": "nope"})
    assert snap["status"] == "idle" and snap["isCurrent"] is True and snap["requiresAction"] is False
    assert snap["lastWakeId"] == wake
    assert snap["eventCursor"]["eventCount"] >= 1  # the wake's start (a read's own record is written after it)
    assert snap["pendingActionKind"] is None
    assert traces["count"] == 1 and traces["traces"][0]["eventTypes"][:2] == ["span.started", "span.completed"]
    assert trace["wakeId"] == wake and {e["type"] for e in trace["events"]} == {"span.completed"}
    assert "No wake nope" in error_text(missing)


@pytest.mark.parametrize("mode", ERAS)
async def test_the_snapshot_maps_the_sessions_resources_each_readable(
    runtime: Runtime, connect: Connect, mode: str
) -> None:
    """Issue 38, item 8: the reference's `artifactPaths`, as this server's resources: a bounded map, each URI one
    resources/read answers, the same as resources/list names for the session."""
    async with connect(runtime, mode=mode) as client:
        snap = data(await client.call_tool("session_get_snapshot", {}))
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        mapped = snap["resources"]
        uris = [mapped["under"] + path for path in mapped["paths"]]
        for uri in uris:
            assert (await client.read_resource(uri)).contents
        only = data(await client.call_tool("session_get_snapshot", {"fields": ["resources"]}))
    session = snap["sessionId"]
    assert mapped["under"] == f"managed-tools://sessions/{session}/" and "memory/shell_state" in mapped["paths"]
    assert {"memory/session_state", "outcome/evaluation", "shell/history", "session/children"} <= set(mapped["paths"])
    assert set(uris) <= listed and mapped["attachments"] == []
    assert only["resources"] == mapped


async def test_event_windows_after_before_around(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        for _ in range(3):
            await client.call_tool("environment_describe", {})
        log = data(await client.call_tool("session_get_events", {"limit": 200}))["events"]
        ids = [e["id"] for e in log]
        middle = ids[3]
        around = data(
            await client.call_tool("session_get_events", {"aroundEventId": middle, "beforeLimit": 2, "afterLimit": 1})
        )
        after = data(await client.call_tool("session_get_events", {"afterEventId": ids[4], "limit": 2}))
        between = data(
            await client.call_tool(
                "session_get_events", {"afterEventId": ids[1], "beforeEventId": ids[5], "limit": 200}
            )
        )
        typed = data(await client.call_tool("session_get_events", {"types": ["span.completed"], "limit": 2}))
        unknown = await client.call_tool("session_get_events", {"afterEventId": "missing"})
        lonely = await client.call_tool("session_get_events", {"beforeLimit": 2})
    assert [e["id"] for e in around["events"]] == ids[1:5]
    # limit keeps the last N of the window: the newest events, all after ids[4]
    assert len(after["events"]) == 2 and not {e["id"] for e in after["events"]} & set(ids[:6])
    assert [e["id"] for e in between["events"]] == ids[2:5]
    assert typed["count"] == 2 and all(e["type"] == "span.completed" for e in typed["events"])
    assert "No event missing" in error_text(unknown)
    assert "only apply with aroundEventId" in error_text(lonely)


async def test_session_list_relations_filters_and_order(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        current = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        async with runtime.db.write() as tx:
            parentless = await sessions.create_session(tx, "default", title="other")
            child = await sessions.create_session(tx, "default", parent_id=current, title="child")
            await sessions.create_session(tx, "someone-else", title="hidden")
        listed = data(await client.call_tool("session_list", {}))
        children = data(await client.call_tool("session_list", {"lineage": "children"}))
        without_current = data(await client.call_tool("session_list", {"includeCurrent": False, "limit": 1}))
        recent = data(await client.call_tool("session_list", {"activeMinutes": 5}))
    ids = [s["sessionId"] for s in listed["sessions"]]
    assert set(ids) == {current, parentless.id, child.id}  # never another agent's sessions
    assert ids[0] == current  # setup matches first; the others never connected
    assert ids[1] == child.id  # related sessions before unrelated ones
    by_id = {s["sessionId"]: s for s in listed["sessions"]}
    assert by_id[child.id]["relationToCurrent"] == "child" and by_id[current]["childCount"] == 1
    assert [s["sessionId"] for s in children["sessions"]] == [child.id]
    assert without_current["count"] == 1 and without_current["total"] == 2
    assert current not in [s["sessionId"] for s in without_current["sessions"]]
    assert recent["total"] == 3


@pytest.mark.parametrize("mode", ERAS)
async def test_another_agents_session_is_refused(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with runtime.db.write() as tx:
        foreign = await sessions.create_session(tx, "beta")
    async with connect(runtime, mode) as client:
        for tool, args in [
            ("session_get_snapshot", {"sessionId": foreign.id}),
            ("session_get_events", {"sessionId": foreign.id}),
            ("session_list_traces", {"sessionId": foreign.id}),
            ("session_get_trace", {"sessionId": foreign.id, "wakeId": "x"}),
        ]:
            text = error_text(await client.call_tool(tool, args))
            assert text == f"Session {foreign.id} is not available to agent default.", tool
        unknown = error_text(await client.call_tool("session_get_snapshot", {"sessionId": "ghost"}))
    assert unknown == "Session ghost is not available to agent default."


async def test_resumed_session_keeps_its_history(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        first = data(await client.call_tool("session_get_snapshot", {}))
    async with connect(runtime, session_id=first["sessionId"]) as client:
        again = data(await client.call_tool("session_get_snapshot", {}))
        traces = data(await client.call_tool("session_list_traces", {}))
    assert again["sessionId"] == first["sessionId"]
    assert again["lastWakeId"] != first["lastWakeId"]
    assert traces["count"] == 2
    assert traces["traces"][1]["latestSummary"] == "Disconnected"
