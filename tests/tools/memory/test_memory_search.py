"""memory_search across sessions: promotion readiness on hits, only texts naming a query word, a hyphenated query as
one phrase, other sessions' shell history and checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Connect, data

from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio


async def test_memory_search_hits_carry_the_sessions_promotion_readiness(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await client.call_tool("outcome_define", {"title": "Ship", "successCriteria": ["heron verified"]})
        await client.call_tool("memory_write", {"target": "session_state", "content": "heron verified today"})
        evaluation = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        found = data(await client.call_tool("memory_search", {"query": "heron"}))
    assert evaluation["status"] == "pass"
    session_hits = [h for h in found["hits"] if h["sessionId"] is not None]
    assert session_hits and all(h["promotionReady"] is True for h in session_hits)
    assert all(h["outcomeStatus"] == "pass" and h["outcomeTrend"] == "first_iteration" for h in session_hits)


async def test_memory_search_drops_texts_that_name_no_query_word(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await client.call_tool("memory_write", {"target": "working_buffer", "content": "lunch at the café"})
        folded = data(await client.call_tool("memory_search", {"query": "cafe"}))
        exact = data(await client.call_tool("memory_search", {"query": "café"}))
    assert folded["count"] == 0  # the index folds accents, but the text holds no "cafe"
    assert [h["source"] for h in exact["hits"]] == ["working_buffer"]


@pytest.mark.both_backends
async def test_a_hyphenated_query_matches_as_one_phrase(runtime: Runtime, connect: Connect) -> None:
    """Issue 27: `out-of-the-blue-xyzzy` was split into words, so any text holding `out` matched it."""
    async with connect(runtime) as client:
        await client.call_tool("memory_write", {"target": "working_buffer", "content": "went out for a walk"})
        await client.call_tool("memory_write", {"target": "session_state", "content": "the blue door"})
        missing = data(await client.call_tool("memory_search", {"query": "out-of-the-blue-xyzzy"}))
        await client.call_tool("memory_write", {"target": "session_state", "content": "said out-of-the-blue-xyzzy"})
        found = data(await client.call_tool("memory_search", {"query": "out-of-the-blue-xyzzy"}))
    assert missing["count"] == 0, missing["hits"]
    assert [h["source"] for h in found["hits"]] == ["session_state"]
    assert "identifier-match:1" in found["hits"][0]["reasons"]


async def test_memory_search_finds_another_sessions_shell_commands_and_checkpoint(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / "osprey_report.txt").write_text("x")
    async with connect(runtime) as first:
        listed = data(await first.call_tool("bash", {"command": "ls"}))
        mine = data(await first.call_tool("session_get_snapshot", {}))["sessionId"]
        checkpoint = data(await first.call_tool("memory_search", {"query": "bash success"}))
    async with connect(runtime) as second:
        found = data(await second.call_tool("memory_search", {"query": "osprey_report.txt"}))
        expanded = data(await second.call_tool("shell_read_last_output", {"sessionId": mine}))
    async with runtime.db.write() as tx:  # the first session ran under another setup
        await tx.execute("UPDATE wakes SET setup_fingerprint = ? WHERE session_id = ?", ("0" * 64, mine))
    async with connect(runtime) as third:
        moved = data(await third.call_tool("memory_search", {"query": "osprey_report.txt"}))
    assert "osprey_report.txt" in listed["stdout"]
    assert [(h["source"], h["sessionId"]) for h in checkpoint["hits"]] == [("checkpoint", mine)]
    assert "source:checkpoint+1" in checkpoint["hits"][0]["reasons"]
    shell_hits = [h for h in found["hits"] if h["source"] == "shell_state"]
    assert [h["sessionId"] for h in shell_hits] == [mine]
    assert "osprey_report.txt" in shell_hits[0]["snippet"]
    # Reference §3: a shell state hit is read in full as its last command's output, as the expansion asks.
    assert shell_hits[0]["expansion"]["tool"] == "shell_read_last_output"
    assert shell_hits[0]["expansion"]["args"] == {"sessionId": mine}
    assert "osprey_report.txt" in expanded["lastCommand"]["stdout"]
    # A hit from a session under another setup points at the setup comparison, as session_search_context does.
    moved_hits = [h for h in moved["hits"] if h["sessionId"] == mine]
    assert moved_hits and {h["expansion"]["tool"] for h in moved_hits} == {"agent_compare_setup"}
    assert moved_hits[0]["expansion"]["args"] == {"sessionId": mine}
