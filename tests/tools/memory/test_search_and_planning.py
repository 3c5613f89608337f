"""memory_search (FTS5 + the reference's boosts, safe against FTS syntax) and the planning suite's rules."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ERAS, Connect, data, error_text
from mcp import Client

from managed_tools.stores import memory, search, sessions
from managed_tools.stores.provenance import Provenance
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


async def seed(client: Client) -> None:
    await client.call_tool(
        "learning_record",
        {"kind": "lesson", "title": "Deploy with the canary script", "detail": "scripts/deploy.sh catches drift."},
    )
    await client.call_tool(
        "memory_write", {"target": "session_state", "content": "We deploy on Fridays. The canary failed once."}
    )
    await client.call_tool("memory_write", {"target": "working_buffer", "content": "unrelated scratch about lunch"})


async def find(client: Client, query: str, **extra: Any) -> dict[str, Any]:
    return data(await client.call_tool("memory_search", {"query": query, **extra}))


@pytest.mark.parametrize("mode", ERAS)
async def test_ranking_reasons_and_expansion(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        await seed(client)
        result = await find(client, "canary deploy")
        again = await find(client, "canary deploy")
        path = await find(client, "scripts/deploy.sh")
        phrase = await find(client, '"deploy on Fridays"')
    hits = result["hits"]
    assert [h["source"] for h in hits] == ["learning", "session_state"]  # the learning's +5 boost wins
    top = hits[0]
    assert "term-overlap:2" in top["reasons"] and "source:learning+5" in top["reasons"]
    assert any(r.startswith("bm25:") for r in top["reasons"]) and "setup-match+2" in top["reasons"]
    assert top["expansion"]["tool"] == "learning_list"
    assert hits[1]["expansion"] == {
        "tool": "memory_read",
        "args": {"target": "session_state", "sessionId": hits[1]["sessionId"]},
        "rationale": "Read the whole store this snippet comes from.",
    }
    assert "canary" in hits[1]["snippet"].lower() and len(hits[1]["snippet"]) <= 180
    assert again == result  # deterministic
    assert path["hits"][0]["source"] == "learning" and "path-match:1" in path["hits"][0]["reasons"]
    assert [h["source"] for h in phrase["hits"]] == ["session_state"]
    assert "exact-phrase:1" in phrase["hits"][0]["reasons"]


@pytest.mark.parametrize(
    "query",
    ['"', '"canary', "canary*", "canary NEAR deploy", "NEAR(canary deploy)", "-canary", "canary AND NOT deploy",
     "body:canary", "(canary", "canary)", "^canary", "can'ary", "'", "canary OR", "{canary}", "can:ary"],
)  # fmt: skip
async def test_fts_syntax_in_queries_is_just_text(runtime: Runtime, connect: Connect, query: str) -> None:
    async with connect(runtime) as client:
        await seed(client)
        result = await client.call_tool("memory_search", {"query": query})
    if result.is_error:
        assert "no searchable words" in error_text(result)
    else:
        found = data(result)
        assert found["query"] == query
        if "canary" in query:
            assert found["count"] >= 1


async def test_query_limits(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await seed(client)
        too_long = await client.call_tool("memory_search", {"query": "canary " * 200})
        long_ok = await find(client, "canary " + " ".join(f"word{n}" for n in range(100)))
        cut = await find(client, " ".join(f"word{n}" for n in range(100)) + " canary")
        stopwords = await client.call_tool("memory_search", {"query": "the of a"})
        empty = await client.call_tool("memory_search", {"query": "  "})
    assert "at most 1000 characters" in error_text(too_long)
    assert long_ok["count"] >= 1
    assert cut["count"] == 0  # terms past the first 32 are dropped, never an error
    assert "no searchable words" in error_text(stopwords)
    assert "field 'query'" in error_text(empty)


async def test_lineage_and_agents(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        current = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        async with runtime.db.write() as tx:
            child = await sessions.create_session(tx, "default", parent_id=current)
            stranger = await sessions.create_session(tx, "beta")
            for session, agent in ((child.id, "default"), (stranger.id, "beta")):
                await memory.write(
                    tx,
                    scope=session,
                    target="session_state",
                    agent_id=agent,
                    session_id=session,
                    wake_id=None,
                    content="orchid migration notes",
                    mode="replace",
                    source="memory_write",
                    provenance=Provenance(),
                    searchable_title="session_state",
                )
            await search.upsert(
                tx, key="x", source="learning", agent_id="beta", session_id=None, title="t", body="orchid secret"
            )
        everything = await find(client, "orchid")
        children = await find(client, "orchid", lineage="children")
        siblings = await find(client, "orchid", lineage="siblings")
    assert [h["sessionId"] for h in everything["hits"]] == [child.id]  # never another agent's memory
    assert "relation+2" in everything["hits"][0]["reasons"]
    assert children["count"] == 1 and siblings["count"] == 0


# ---- planning -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_planning_rules(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        before = await client.call_tool("planning_add_step", {"steps": ["x"]})
        read_none = await client.call_tool("planning_read_plan", {})
        plan = data(await client.call_tool("planning_setup_plan", {"objective": "Ship", "initialSteps": ["a", "b"]}))
        added = data(await client.call_tool("planning_add_step", {"steps": ["c"]}))
        data(await client.call_tool("planning_update_step", {"stepId": 1, "status": "done"}))
        data(await client.call_tool("planning_update_step", {"stepId": 2, "status": "done", "title": "b2"}))
        done = data(await client.call_tool("planning_update_step", {"stepId": 3, "status": "done"}))
        reopened = data(await client.call_tool("planning_update_step", {"stepId": 3, "status": "in_progress"}))
        replaced = data(await client.call_tool("planning_setup_plan", {"objective": "Again", "initialSteps": ["d"]}))
        missing = await client.call_tool("planning_update_step", {"stepId": 1, "status": "done"})
        nothing = await client.call_tool("planning_update_step", {"stepId": 4})
        blank = await client.call_tool("planning_add_step", {"steps": ["   "]})
        long_title = await client.call_tool("planning_add_step", {"steps": ["t" * 501]})
        none = await client.call_tool("planning_add_step", {"steps": []})
        read = data(await client.call_tool("planning_read_plan", {}))
    assert "no plan yet" in error_text(before) and "no plan yet" in error_text(read_none)
    assert [s["stepId"] for s in plan["plan"]["steps"]] == [1, 2] and plan["addedStepIds"] == [1, 2]
    assert added["addedStepIds"] == [3]
    assert done["plan"]["status"] == "completed" and done["plan"]["done"] == 3
    assert reopened["plan"]["status"] == "active"
    assert replaced["plan"]["steps"] == [{"stepId": 4, "title": "d", "status": "pending"}]  # ids never reused
    assert "has no step 1" in error_text(missing)
    assert "give title, status or both" in error_text(nothing)
    assert "field 'steps.0'" in error_text(blank)
    assert "at most 500 characters" in error_text(long_title)
    assert "at least 1 item" in error_text(none)
    assert read["plan"]["objective"] == "Again" and read["plan"]["pending"] == 1


async def test_each_session_has_its_own_plan(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        data(await client.call_tool("planning_setup_plan", {"objective": "Mine", "initialSteps": ["a"]}))
    async with connect(runtime) as other:
        result = await other.call_tool("planning_read_plan", {})
    assert "no plan yet" in error_text(result)
