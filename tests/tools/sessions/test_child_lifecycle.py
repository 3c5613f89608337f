"""Seed 000 §4-7 through a real client: a named child that takes further messages (resumable), a cap on a
parent's unfinished children, a completion queued to the parent (implicit), attachments copied across sessions,
and session_list_children with session_list's filters. The children run through the operator's model, a scripted
HTTP server (tests/support/scripted_model.py)."""

from __future__ import annotations

import json
import warnings
from typing import Any

import anyio
import pytest
from conftest import ERAS, Connect, Updates, data, error_text, runtime_with
from support.scripted_model import call, say, scripted_model
from test_delegation import child_events
from test_model_provider import spec, with_key

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.stores import events
from managed_tools.tools.framework.context.attachments import store
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.context.uris import view_uri
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import NoArguments, WireModel

pytestmark = pytest.mark.anyio


class Written(WireModel):
    path: str


async def write_report(ctx: ToolContext, _: NoArguments) -> Written:
    ref = await ctx.attach(b"the child's report", name="report.txt", mime_type="text/plain")
    return Written(path=ref.path)


REPORT = ToolDefinition(
    name="report_probe",
    title="Report",
    description="Test tool: attaches a report to the session.",
    input_model=NoArguments,
    output_model=Written,
    handler=write_report,
    read_only=False,
)


async def delegate(client: Any, **given: Any) -> dict[str, Any]:
    return data(await client.call_tool("session_delegate", {"name": "helper", "task": "Help out", **given}))


@pytest.mark.parametrize("mode", ERAS)
async def test_a_resumable_child_answers_each_message_in_one_conversation(
    config: ServeConfig, connect: Connect, mode: str
) -> None:
    script = [say("First answer."), say("Second answer.")]
    async with (
        scripted_model("openai", script) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt, mode) as client:
            made = await delegate(client, name="scribe", resumable=True)
            child = made["childSession"]["sessionId"]
            first = data(await client.call_tool("session_run_child", {"sessionId": child}))
            second = data(await client.call_tool("session_message_child", {"sessionId": child, "message": "And?"}))
            listed = data(await client.call_tool("session_list_children", {}))
        found = await child_events(rt, child)
    assert made["childSession"]["tags"] == ["name:scribe"] and listed["sessions"][0]["tags"] == ["name:scribe"]
    assert first["response"] == "First answer." and second["response"] == "Second answer."
    assert second["mode"] == "model" and second["loopStopReason"] == "idle"
    said = [(m["role"], m["content"]) for m in model.requests[1]["body"]["messages"][1:]]
    assert said == [("user", "Help out"), ("assistant", "First answer."), ("user", "And?")]
    answers = [json.loads(e["payload"])["text"] for e in found if e["type"] == "agent.message"]
    assert answers == ["First answer.", "Second answer."]


async def test_a_child_that_is_not_resumable_takes_no_message_once_it_answered(
    config: ServeConfig, connect: Connect
) -> None:
    async with (
        scripted_model("anthropic", [say("Done.")]) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as client:
            child = (await delegate(client))["childSession"]["sessionId"]
            before = data(await client.call_tool("session_message_child", {"sessionId": child, "message": "Also X"}))
            refused = await client.call_tool("session_message_child", {"sessionId": child, "message": "Again"})
    assert before["response"] == "Done."
    assert "was not delegated resumable" in error_text(refused) and "resumable: true" in error_text(refused)


async def test_without_a_model_a_message_waits_for_the_childs_client(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        child = (await delegate(client))["childSession"]["sessionId"]
        sent = data(await client.call_tool("session_message_child", {"sessionId": child, "message": "Next step"}))
    assert sent["mode"] == "handoff" and sent["howToWork"]["stdio"].endswith(child)
    found = await child_events(runtime, child)
    assert [(e["type"], e["processed"]) for e in found[-1:]] == [("user.message", 0)]
    assert json.loads(found[-1]["payload"])["text"] == "Next step"


async def test_max_instances_caps_the_unfinished_children(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await delegate(client, name="one", maxInstances=2)
        await delegate(client, name="two", maxInstances=2)
        refused = await client.call_tool("session_delegate", {"name": "three", "task": "More", "maxInstances": 2})
        assert "already has 2 unfinished child session(s)" in error_text(refused)
        await delegate(client, name="three")  # no cap given: no cap
        listed = data(await client.call_tool("session_list_children", {"limit": 10}))
    assert sorted(t for s in listed["sessions"] for t in s["tags"]) == ["name:one", "name:three", "name:two"]


async def test_list_children_takes_session_lists_filters(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        with_outcome = (await delegate(client, name="goal", title="Goal met"))["childSession"]["sessionId"]
        await delegate(client, name="plain")
        found = data(await client.call_tool("session_list_children", {"hasOutcome": True}))
        assert [s["sessionId"] for s in found["sessions"]] == [with_outcome]
        assert data(await client.call_tool("session_list_children", {"status": "terminated"}))["count"] == 0
        recent = data(await client.call_tool("session_list_children", {"activeMinutes": 5}))
        assert recent["count"] == 2
        assert "lineage" in error_text(await client.call_tool("session_list_children", {"lineage": "children"}))


@pytest.mark.parametrize("mode", ERAS)
async def test_an_implicit_child_queues_its_completion_to_the_parent(
    config: ServeConfig, connect: Connect, mode: str
) -> None:
    heard = Updates()
    async with (
        scripted_model("anthropic", [say("All done.")]) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt, mode, message_handler=heard) as client:
            parent = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
            uri = view_uri("children", parent)
            listed = await client.list_resources()
            assert uri in {str(r.uri) for r in listed.resources}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated for 2026-07-28
                if mode == "legacy":
                    await client.subscribe_resource(uri)
            made = await delegate(client, name="closer", parentCommunication="implicit")
            data(await client.call_tool("session_run_child", {"sessionId": made["childSession"]["sessionId"]}))
            if mode == "legacy":
                with anyio.fail_after(10):
                    await heard.arrived.wait()
                assert uri in heard.uris
            shown = json.loads((await client.read_resource(uri)).contents[0].text)  # type: ignore[union-attr]
        async with rt.db.read() as tx:
            queued = await events.window_events(
                tx, parent, events.EventFilter(types=["session.child_completed"], include_processed=False)
            )
    assert shown["sessions"][0]["tags"] == ["name:closer"]
    (event,) = queued
    assert event.payload["name"] == "closer" and event.payload["response"] == "All done." and not event.processed


async def test_an_explicit_child_queues_nothing(config: ServeConfig, connect: Connect) -> None:
    async with (
        scripted_model("openai", [say("Quietly done.")]) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as client:
            parent = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
            child = (await delegate(client))["childSession"]["sessionId"]
            data(await client.call_tool("session_run_child", {"sessionId": child}))
        assert "session.child_completed" not in [e["type"] for e in await child_events(rt, parent)]


async def test_attachments_are_copied_to_the_child_and_back(config: ServeConfig, connect: Connect) -> None:
    script = [call("report_probe", {}), say("Report attached.")]
    async with (
        scripted_model("openai", script) as model,
        runtime_with(config.model_copy(update={"model": spec(model)}), REPORT) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as client:
            parent = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
            brief = await store(rt, parent, b"the brief", name="brief.md", mime_type="text/markdown")
            assert brief.ref is not None
            made = await delegate(client, attachments=[brief.ref.id])
            child = made["childSession"]["sessionId"]
            (copied,) = made["attachments"]
            assert copied["id"] != brief.ref.id and copied["path"].startswith(f"/attachments/{child}/")
            read = await client.call_tool("read", {"path": copied["path"]})
            assert "the brief" in read.content[0].text  # type: ignore[union-attr]
            ran = data(await client.call_tool("session_run_child", {"sessionId": child, "returnAttachments": True}))
            (back,) = ran["attachments"]
            assert back["path"].startswith(f"/attachments/{parent}/") and back["name"] == "report.txt"
            returned = await client.call_tool("read", {"path": back["path"]})
            assert "the child's report" in returned.content[0].text  # type: ignore[union-attr]
            missing = await client.call_tool(
                "session_delegate", {"name": "x", "task": "y", "attachments": ["01234567-89ab-7def-8123-456789abcdef"]}
            )
    assert "Cannot copy the attachment" in error_text(missing)
    assert copied["path"] in json.dumps(model.requests[0]["body"]["messages"])  # the child's model is told where
