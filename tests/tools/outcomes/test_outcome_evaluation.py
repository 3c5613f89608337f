"""Outcomes seen from the session: how outcome_evaluate weighs failed and later work, session_list's outcome
filters and order, outcome_define on another session of the same agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ERAS, Connect, data, error_text
from test_permissions import answer

from managed_tools.stores import outcomes, sessions
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio


async def test_an_early_stumble_does_not_fail_the_whole_connection(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("old\n")
    async with connect(runtime) as client:
        await client.call_tool("outcome_define", {"title": "Notes", "successCriteria": ["notes rewritten"]})
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "notes rewritten"}))
        assert (await client.call_tool("edit", {"path": "gone.md", "oldText": "a", "newText": "b"})).is_error
        data(await client.call_tool("grep", {"query": "old"}))  # a read does not make up for a failed write
        write_open = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        data(await client.call_tool("write", {"path": "notes.md", "content": "new\n"}))
        written = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
    assert write_open["status"] == "fail" and "edit" in write_open["summary"]
    # The step offered is one that can fix it: the failed tool itself, not a trace to read.
    assert write_open["nextSuggestedTool"]["tool"] == "edit"
    assert written["status"] == "pass"


async def test_a_failed_lookup_does_not_fail_the_outcome(runtime: Runtime, connect: Connect) -> None:
    """Issue 38 item 2: a read-only call that failed changed nothing; it neither fails the outcome nor blocks a
    promotion."""
    async with connect(runtime, elicitation_callback=answer("accept", {"approve": True})) as client:
        data(await client.call_tool("outcome_define", {"title": "Notes", "successCriteria": ["notes checked"]}))
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "notes checked"}))
        missing = await client.call_tool("memory_read_version", {"target": "session_state", "versionId": "nope"})
        unread = await client.call_tool("read", {"path": "nope.txt"})
        evaluated = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        promoted = await client.call_tool("memory_promote_note", {"content": "notes are checked"})
    assert error_kind(missing) == "tool_error" and unread.is_error  # real failures, of lookups
    assert evaluated["status"] == "pass" and evaluated["promotionReady"] is True, evaluated
    assert data(promoted)["outcomeEvaluation"]["status"] == "pass"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_failing_command_outweighs_what_the_model_wrote(
    runtime: Runtime, connect: Connect, workspace: Path, mode: str
) -> None:
    """Issue 38 item 1: the session's test run exited 1 and the model wrote "all tests pass": the evaluation
    says fail, the gate refuses before any person is asked, and a clean rerun of the same command passes."""
    (workspace / "check.sh").write_text("echo '1 failed'\nexit 1\n")
    asked: list[str] = []
    async with connect(runtime, mode, elicitation_callback=answer("accept", {"approve": True}, asked)) as client:
        data(await client.call_tool("outcome_define", {"title": "Tests", "successCriteria": ["all tests pass"]}))
        ran = data(await client.call_tool("shell_run", {"command": "sh check.sh"}))
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "all tests pass"}))
        graded = data(await client.call_tool("outcome_grade", {}))["grade"]
        evaluated = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        refused = await client.call_tool("memory_promote_note", {"content": "the tests pass"})
        asked_before_fix = len(asked)
        (workspace / "check.sh").write_text("echo ok\n")
        rerun = data(
            await client.call_tool(evaluated["nextSuggestedTool"]["tool"], evaluated["nextSuggestedTool"]["args"])
        )
        passed = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        promoted = data(await client.call_tool("memory_promote_note", {"content": "the tests pass"}))
    assert ran["ok"] is False and ran["exitCode"] == 1
    assert graded["status"] == "done_candidate"  # the memory says so; the evaluation weighs the command
    assert evaluated["status"] == "fail" and evaluated["promotionReady"] is False
    assert "`sh check.sh` exited 1" in evaluated["summary"]
    assert evaluated["nextSuggestedTool"] == {
        "tool": "shell_run",
        "args": {"command": "sh check.sh"},
        "rationale": evaluated["nextSuggestedTool"]["rationale"],
    }
    assert "Current status=fail" in error_text(refused) and error_kind(refused) == "refused"
    assert asked_before_fix == 1  # only the command itself reached a person; the refused promotion did not
    assert rerun["ok"] is True and passed["status"] == "pass", passed
    assert promoted["outcomeEvaluation"]["status"] == "pass"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_blocked_read_only_command_suggests_bash(runtime: Runtime, connect: Connect, mode: str) -> None:
    """Issue 38 item 3 (reference §4): a shell_run waiting for approval that only reads is better run by the
    read-only `bash`, which needs none."""
    async with connect(runtime, mode) as client:  # no elicitation: the request stays pending
        data(await client.call_tool("outcome_define", {"title": "Read", "successCriteria": ["readme read"]}))
        blocked = await client.call_tool("shell_run", {"command": "cat README.md"})
        graded = data(await client.call_tool("outcome_grade", {}))["grade"]
    assert error_kind(blocked) == "permission"
    assert graded["status"] == "blocked"
    assert graded["nextSuggestedTool"]["tool"] == "bash"
    assert graded["nextSuggestedTool"]["args"] == {"command": "cat", "args": ["README.md"], "cwd": "/workspace"}


def error_kind(result: object) -> str:
    meta = getattr(result, "meta", None) or {}
    return str(meta["managed-tools/error"]["kind"])


@pytest.mark.parametrize("mode", ERAS)
async def test_the_gate_loop_ends_in_pass(runtime: Runtime, connect: Connect, mode: str) -> None:
    """Issue 27's first finding: a promotion the gate refused too early is a refusal by design, not failed work,
    so it must not lock the gate once the criterion is met."""
    asked: list[str] = []
    async with connect(runtime, mode, elicitation_callback=answer("accept", {"approve": True}, asked)) as client:
        data(await client.call_tool("outcome_define", {"title": "Gate loop", "successCriteria": ["gate loop checked"]}))
        early = await client.call_tool("memory_promote_note", {"content": "too early"})
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "gate loop checked"}))
        evaluated = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        promoted = data(await client.call_tool("memory_promote_note", {"content": "the gate loop works"}))
    assert "Current status=not_ready" in error_text(early) and error_kind(early) == "refused"
    assert evaluated["status"] == "pass" and evaluated["promotionReady"] is True, evaluated
    assert promoted["outcomeEvaluation"]["status"] == "pass"
    assert len(asked) == 1  # only the promotion that passed the gate reached a person


async def test_a_lost_compare_and_swap_is_not_failed_work(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        data(await client.call_tool("outcome_define", {"title": "CAS", "successCriteria": ["cas checked"]}))
        first = data(await client.call_tool("memory_write", {"target": "session_state", "content": "draft"}))
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "cas checked"}))
        lost = await client.call_tool(
            "memory_write",
            {"target": "session_state", "content": "stale", "expectedVersionId": first["versionId"]},
        )
        evaluated = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
    assert error_kind(lost) == "conflict" and "latest" in error_text(lost).lower()
    assert evaluated["status"] == "pass", evaluated


async def test_a_later_evaluation_on_new_evidence_closes_old_failures(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        data(await client.call_tool("outcome_define", {"title": "Notes", "successCriteria": ["notes checked"]}))
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "notes checked"}))
        failed = await client.call_tool("edit", {"path": "gone.md", "oldText": "a", "newText": "b"})
        data(await client.call_tool("memory_write", {"target": "working_buffer", "content": "before any verdict"}))
        unseen = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        again = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]  # no new evidence
        data(await client.call_tool("memory_write", {"target": "working_buffer", "content": "looked into it"}))
        closed = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
    assert error_kind(failed) == "tool_error"  # a real failure
    # Evidence written before an evaluation reported the failure does not close it: the model never saw it.
    assert unseen["status"] == "fail" and "edit" in unseen["summary"]
    assert again["status"] == "fail"
    assert closed["status"] == "pass", closed


async def test_session_list_filters_and_sorts_by_outcome(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as passed:
        await passed.call_tool("outcome_define", {"title": "Ship", "successCriteria": ["kestrel landed"]})
        await passed.call_tool("memory_write", {"target": "session_state", "content": "kestrel landed"})
        a = data(await passed.call_tool("outcome_evaluate", {}))["sessionId"]
    async with connect(runtime) as other:
        await other.call_tool("outcome_define", {"title": "Other", "successCriteria": ["x"]})
        b = data(await other.call_tool("outcome_evaluate", {}))["sessionId"]
    async with connect(runtime) as plain:
        c = data(await plain.call_tool("session_get_snapshot", {}))["sessionId"]
    async with connect(runtime) as client:
        await client.call_tool("outcome_define", {"title": "ship", "successCriteria": ["y"]})

        async def listed(**filters: object) -> list[str]:
            found = data(await client.call_tool("session_list", {"includeCurrent": False, **filters}))
            return [s["sessionId"] for s in found["sessions"]]

        everything = data(await client.call_tool("session_list", {"includeCurrent": False}))
        with_outcome = await listed(hasOutcome=True)
        without = await listed(hasOutcome=False)
        ready = await listed(promotionReady=True)
        not_ready = await listed(outcomeStatus="not_ready")
        first = await listed(outcomeTrend="first_iteration")
        recent = await listed(activeMinutes=5)
    by_id = {s["sessionId"]: s for s in everything["sessions"]}
    assert by_id[a]["activeOutcomeTitle"] == "Ship" and by_id[a]["outcomeStatus"] == "pass"
    assert by_id[a]["promotionReady"] is True and by_id[a]["outcomeMatchesCurrent"] is True
    assert by_id[a]["outcomeEvaluatedAt"] is not None
    assert by_id[b]["outcomeStatus"] == "not_ready" and by_id[b]["outcomeMatchesCurrent"] is False
    assert by_id[c]["activeOutcomeTitle"] is None and by_id[c]["promotionReady"] is False
    assert everything["sessions"][0]["sessionId"] == a  # the same outcome as the current one first
    assert sorted(with_outcome) == sorted([a, b]) and without == [c]
    assert ready == [a] and not_ready == [b] and sorted(first) == sorted([a, b])
    assert sorted(recent) == sorted([a, b, c])


async def test_outcome_define_takes_a_session_of_the_same_agent(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        current = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        async with runtime.db.write() as tx:
            child = await sessions.create_session(tx, "default", parent_id=current)
            stranger = await sessions.create_session(tx, "beta")
        defined = data(
            await client.call_tool(
                "outcome_define", {"sessionId": child.id, "title": "Child work", "successCriteria": ["done"]}
            )
        )
        read = data(await client.call_tool("outcome_read", {"sessionId": child.id}))
        mine = data(await client.call_tool("outcome_read", {}))
        events = data(await client.call_tool("session_get_events", {"sessionId": child.id}))
        refused = await client.call_tool("outcome_define", {"sessionId": stranger.id, "title": "Not mine"})
    assert defined["sessionId"] == child.id and read["activeOutcome"]["title"] == "Child work"
    assert mine["activeOutcome"] is None
    assert [(e["type"], e["wakeId"]) for e in events["events"]] == [("user.define_outcome", None)]
    assert "not available" in error_text(refused)
    async with runtime.db.read() as tx:
        assert await outcomes.active(tx, stranger.id) is None


async def test_grading_matches_what_the_session_recorded_not_the_world(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    """outcome_grade says so in its description: a file on disk meeting a criterion counts for nothing until the
    session records it in its memory."""
    async with connect(runtime) as client:
        described = {t.name: t.description or "" for t in (await client.list_tools()).tools}["outcome_grade"]
        await client.call_tool("outcome_define", {"title": "Docs", "successCriteria": ["changelog updated"]})
        (workspace / "CHANGELOG.md").write_text("changelog updated\n")
        in_the_world = data(await client.call_tool("outcome_grade", {}))["grade"]
        await client.call_tool("memory_write", {"target": "working_buffer", "content": "changelog updated"})
        recorded = data(await client.call_tool("outcome_grade", {}))["grade"]
    assert "against what this session recorded in memory" in described
    assert in_the_world["status"] == "in_progress" and in_the_world["matchedCriteria"] == 0
    assert recorded["status"] == "done_candidate" and recorded["matchedCriteria"] == 1
