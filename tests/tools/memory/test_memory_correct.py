"""Memory a person can correct (issue 37 item 4): supersede, forget and restore a learning or the agent's notes
through memory_correct, each asking a person with exactly what changes shown; default reads leave the hidden ones
out and say so; the history keeps every state; a new learning names those it repeats or contradicts."""

from __future__ import annotations

import pytest
from conftest import Connect, data, error_text
from test_permissions import answer

from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

RUN = {"kind": "lesson", "title": "Run pytest with -q", "detail": "Run pytest with -q from the repo root"}


async def test_forget_restore_and_supersede_a_learning(runtime: Runtime, connect: Connect) -> None:
    asked: list[str] = []
    async with connect(runtime, elicitation_callback=answer("accept", {"approve": True}, asked)) as client:
        first = data(await client.call_tool("learning_record", RUN))["learning"]
        lid = first["learningId"]
        forgot = data(await client.call_tool("memory_correct", {"action": "forget", "learningId": lid}))
        listed = data(await client.call_tool("learning_list", {}))
        found = data(await client.call_tool("memory_search", {"query": "pytest"}))
        again = await client.call_tool("memory_correct", {"action": "forget", "learningId": lid})
        restored = data(await client.call_tool("memory_correct", {"action": "restore", "learningId": lid}))
        replaced = data(
            await client.call_tool(
                "memory_correct",
                {"action": "supersede", "learningId": lid, "title": "Run the tests with .ci/run",
                 "detail": "CI runs .ci/run; do that", "reason": "CI changed"},
            )
        )  # fmt: skip
        everything = data(await client.call_tool("learning_list", {"includeHidden": True}))
    assert forgot["learning"]["state"] == "forgotten"
    assert listed["count"] == 0 and listed["hidden"] == 1 and "includeHidden" in listed["note"]
    assert not [h for h in found["hits"] if h["source"] == "learning"]
    assert again.is_error and "forgotten already" in error_text(again)
    assert restored["learning"]["state"] == "active"
    assert replaced["learning"]["state"] == "superseded"
    assert replaced["replacementId"] in {item["learningId"] for item in everything["learnings"]}
    assert [c["action"] for c in replaced["history"]] == ["forget", "restore", "supersede"]
    assert replaced["history"][-1]["reason"] == "CI changed"
    assert {item["state"] for item in everything["learnings"]} == {"superseded", "active"}
    # Each change asked, and the question showed the learning and what becomes of it.
    assert len(asked) == 3
    assert f"This forgets learning {lid}" in asked[0] and "Run pytest with -q" in asked[0]
    assert "was: [lesson] Run pytest with -q" in asked[2] and "now: [lesson] Run the tests with .ci/run" in asked[2]


async def test_a_declined_correction_changes_nothing(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime, elicitation_callback=answer("decline")) as client:
        lid = data(await client.call_tool("learning_record", RUN))["learning"]["learningId"]
        declined = await client.call_tool("memory_correct", {"action": "forget", "learningId": lid})
        listed = data(await client.call_tool("learning_list", {}))
    assert declined.is_error and listed["count"] == 1 and listed["hidden"] == 0


async def test_the_notes_forgotten_and_restored_keep_their_versions(runtime: Runtime, connect: Connect) -> None:
    asked: list[str] = []
    async with connect(runtime, elicitation_callback=answer("accept", {"approve": True}, asked)) as client:
        data(await client.call_tool("memory_correct", {"action": "supersede", "target": "workspace_memory_notes",
                                                       "content": "orchids need light"}))  # fmt: skip
        data(await client.call_tool("memory_correct", {"action": "forget", "target": "workspace_memory_notes"}))
        empty = data(await client.call_tool("memory_read", {"target": "workspace_memory_notes"}))
        data(await client.call_tool("memory_correct", {"action": "restore", "target": "workspace_memory_notes"}))
        back = data(await client.call_tool("memory_read", {"target": "workspace_memory_notes"}))
        versions = data(await client.call_tool("memory_list_versions", {"target": "workspace_memory_notes"}))
    assert empty["empty"] and back["content"] == "orchids need light\n"
    assert [v["mode"] for v in versions["versions"]] == ["restore", "forget", "replace"]
    assert "(19 → 0 characters)" in asked[1] and "orchids need light" in asked[1]


async def test_a_duplicate_and_a_contradiction_are_named(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        first = data(await client.call_tool("learning_record", RUN))["learning"]
        same = data(await client.call_tool("learning_record", {**RUN, "title": "run pytest -q"}))
        opposite = data(
            await client.call_tool("learning_record", {**RUN, "detail": "Never run pytest with -q from the repo root"})
        )
        other = data(await client.call_tool("learning_record", {**RUN, "title": "x", "detail": "orchids need light"}))
    assert [(n["relation"], n["learningId"]) for n in same["notices"]] == [("duplicate", first["learningId"])]
    contradiction = [n for n in opposite["notices"] if n["relation"] == "contradiction"]
    assert first["learningId"] in {n["learningId"] for n in contradiction}
    assert "may contradict" in contradiction[0]["message"]
    assert other["notices"] == []
