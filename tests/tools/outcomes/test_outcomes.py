"""Outcomes: the rubric, history with iterations and trend, and the gate on memory_promote_note."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, error_text
from mcp import Client
from test_permissions import answer

from managed_tools.stores import approvals
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

CRITERIA = ["changelog updated", "tests pass"]


async def define(client: Client, criteria: list[str] | None = None) -> dict[str, Any]:
    messy = [*CRITERIA, " ", "tests pass"]  # a blank and a duplicate, which outcome_define drops
    args = {"title": "Ship the fix", "detail": "  ", "successCriteria": messy if criteria is None else criteria}
    return data(await client.call_tool("outcome_define", args))


async def evaluate(client: Client, *, history: bool = True) -> dict[str, Any]:
    return data(await client.call_tool("outcome_evaluate", {"includeHistory": history}))


@pytest.mark.parametrize("mode", ERAS)
async def test_the_rubric_from_missing_to_pass(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        missing = await evaluate(client)
        defined = await define(client)
        not_ready = await evaluate(client, history=False)
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "changelog updated"}))
        half = data(await client.call_tool("outcome_grade", {}))
        data(await client.call_tool("memory_write", {"target": "working_buffer", "content": "all tests pass"}))
        passed = await evaluate(client)
        snapshot = data(await client.call_tool("session_get_snapshot", {}))
        history = data(await client.call_tool("outcome_history", {}))
    assert missing["evaluation"]["status"] == "missing_outcome"
    assert missing["evaluation"]["nextSuggestedTool"]["tool"] == "outcome_define"
    assert missing["evaluationHistory"] == []  # nothing to record without an outcome
    assert defined["activeOutcome"]["successCriteria"] == CRITERIA  # trimmed, blanks and duplicates dropped
    assert defined["activeOutcome"]["detail"] is None
    assert not_ready["grade"] == {"status": "in_progress", "matchedCriteria": 0, "totalCriteria": 2}
    # The grade is not repeated (its evidence is the evaluation's) and the history comes on request (issue 38).
    assert not_ready["evaluationHistory"] is None and (not_ready["iteration"], not_ready["historyCount"]) == (0, 1)
    assert not_ready["evaluation"]["status"] == "not_ready" and not_ready["evaluation"]["trend"] == "first_iteration"
    assert half["grade"]["matchedCriteria"] == 1 and half["grade"]["confidence"] == "medium"
    assert passed["grade"]["status"] == "done_candidate"
    assert passed["evaluation"]["status"] == "pass" and passed["evaluation"]["promotionReady"] is True
    assert passed["evaluation"]["trend"] == "improving"
    assert snapshot["outcomeStatus"] == "pass" and snapshot["promotionReady"] is True
    assert snapshot["activeOutcome"]["title"] == "Ship the fix" and snapshot["nextOutcomeStep"] is None
    assert [e["iteration"] for e in history["evaluations"]] == [0, 1] and history["latestIteration"] == 1


async def test_a_failed_call_in_the_latest_wake_means_fail(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await define(client, ["release drafted"])
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "release drafted"}))
        empty = await client.call_tool("memory_write", {"target": "session_state", "content": "  "})
        assert empty.is_error
        failed = await evaluate(client)
        typo = await client.call_tool("memory_write", {"target": "nowhere", "content": "x"})
        assert typo.is_error
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "release drafted"}))
        recovered = await evaluate(client)
    assert failed["evaluation"]["status"] == "fail" and failed["evaluation"]["confidence"] == "high"
    assert failed["evaluation"]["nextSuggestedTool"]["tool"] == "memory_write"  # the step that can fix it
    assert recovered["evaluation"]["status"] == "pass"  # the failed write was redone; the typo never ran


async def test_a_pending_request_blocks(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await define(client)
        blocked_call = await client.call_tool("memory_promote_note", {"content": "n", "requireOutcomePass": False})
        request_id = (blocked_call.meta or {})["managed-tools/requiresAction"]["requestId"]
        graded = data(await client.call_tool("outcome_grade", {}))
        described = data(await client.call_tool("permissions_describe", {}))
    assert graded["grade"]["status"] == "blocked" and request_id in graded["grade"]["summary"]
    assert graded["grade"]["nextSuggestedTool"] == {
        "tool": "permissions_check",
        "args": {"toolName": "memory_promote_note"},
        "rationale": "See what the person must decide before work can go on.",
    }
    assert described["outcomeEvaluation"]["status"] == "blocked"


async def test_history_trend_replacement_and_cap(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await define(client)
        first = await evaluate(client)
        again = await evaluate(client)  # same wake, same verdict: replaces the last entry
    async with connect(runtime, session_id=first["sessionId"]) as client:
        later = await evaluate(client)  # a new wake with the same verdict still replaces (same verdict)
        for n in range(14):
            await client.call_tool(
                "memory_write", {"target": "session_state", "content": "changelog updated" * (n % 2)}
            )
            await client.call_tool("outcome_define", {"title": f"Goal {n}", "successCriteria": ["x"]})
            await evaluate(client)
        history = data(await client.call_tool("outcome_history", {"limit": 12}))
    assert [e["iteration"] for e in again["evaluationHistory"]] == [0]
    assert again["evaluation"]["trend"] == "stable"
    assert [e["iteration"] for e in later["evaluationHistory"]] == [0]
    assert history["count"] == 12  # capped
    assert history["evaluations"][-1]["outcomeTitle"] == "Goal 13"


async def test_stalled_outcome_suggests_the_history(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await define(client)
        first = await evaluate(client)
        await client.call_tool("memory_write", {"target": "session_state", "content": "changelog updated, tests pass"})
        await client.call_tool("memory_write", {"target": "session_state", "content": " "})  # fails: empty
        failing = await evaluate(client)
        await client.call_tool("memory_write", {"target": "session_state", "content": "nothing yet"})
        third = await evaluate(client)
        snapshot = data(await client.call_tool("session_get_snapshot", {}))
    assert [first["evaluation"]["status"], failing["evaluation"]["status"]] == ["not_ready", "fail"]
    assert third["evaluation"]["status"] == "not_ready" and third["evaluation"]["trend"] == "improving"
    assert third["evaluation"]["nextSuggestedTool"] == {
        "tool": "outcome_history",
        "args": {"sessionId": third["sessionId"], "limit": 2},
        "rationale": "Several evaluations without a pass: look at what changed between them.",
    }
    assert [e["iteration"] for e in third["evaluationHistory"]] == [0, 1, 2]
    assert snapshot["outcomeEvaluationHistoryCount"] == 3 and snapshot["outcomeEvaluationLatestIteration"] == 2


# ---- the gate ------------------------------------------------------------------------------------------------


async def test_the_gate_on_memory_promote_note(runtime: Runtime, connect: Connect) -> None:
    asked: list[str] = []
    yes = answer("accept", {"approve": True}, asked)
    async with connect(runtime, "legacy", elicitation_callback=yes) as client:
        ungated = data(await client.call_tool("memory_promote_note", {"content": "no outcome yet"}))
        await define(client)
        closed = await client.call_tool("memory_promote_note", {"content": "blocked by the gate"})
        bypass = data(
            await client.call_tool("memory_promote_note", {"content": "bypassed", "requireOutcomePass": False})
        )
        await client.call_tool("memory_write", {"target": "session_state", "content": "changelog updated; tests pass"})
        opened = data(
            await client.call_tool(
                "memory_promote_note",
                {"content": "gate open", "mode": "append", "expectedVersionId": bypass["versionId"]},
            )
        )
        notes = data(await client.call_tool("memory_read", {"target": "workspace_memory_notes"}))
        workspace = data(await client.call_tool("memory_read", {"target": "workspace_memory"}))
    assert ungated["outcomeEvaluation"] is None  # no outcome: the gate does not apply
    assert "requires outcome_evaluate to return status=pass" in error_text(closed)
    assert "Current status=not_ready" in error_text(closed) and "Next tool: memory_write" in error_text(closed)
    assert len(asked) == 3  # the closed gate refused before a person was asked
    assert "This replaces the notes shared by every session" in asked[0]
    assert bypass["outcomeEvaluation"] is None
    assert opened["outcomeEvaluation"]["status"] == "pass"
    assert notes["content"] == "bypassed\ngate open\n"
    assert "gate open" in workspace["content"]


async def test_require_outcome_pass_without_an_outcome(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime, "legacy", elicitation_callback=answer("accept", {"approve": True})) as client:
        refused = await client.call_tool("memory_promote_note", {"content": "x", "requireOutcomePass": True})
    assert "Current status=missing_outcome" in error_text(refused)
    async with runtime.db.read() as tx:
        assert await approvals.list_open(tx) == []


async def test_sessions_of_other_agents_are_not_evaluated(runtime: Runtime, connect: Connect) -> None:
    from managed_tools.stores import sessions

    async with runtime.db.write() as tx:
        other = await sessions.create_session(tx, "beta")
    async with connect(runtime) as client:
        for tool in ("outcome_read", "outcome_grade", "outcome_evaluate", "outcome_history"):
            result = await client.call_tool(tool, {"sessionId": other.id})
            assert "is not available to agent default" in error_text(result), tool


_ = types
