"""Cross-session recall (issue 13 item 1): the FTS5 index of events and the three search tools over it, with real
sessions (a stdio server in its own process, several runtimes on one data dir) and a real MCP client."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ERAS, Connect, data, error_text
from mcp import Client, StdioServerParameters

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import event_search, events, sessions
from managed_tools.stores.db import Database, Tx
from managed_tools.stores.db import sqlite_file as db_module
from managed_tools.stores.db.migrations import MIGRATIONS
from managed_tools.stores.events import event_text
from managed_tools.stores.ids import utc_now, uuid7
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

MARKER = "zebra-quartz-42"
SEARCHES = ("session_search_context", "session_search_traces", "retrieval_search")


async def search(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    return data(await client.call_tool(tool, args))


def hit_sessions(result: dict[str, Any]) -> set[str]:
    return {hit["sessionId"] for hit in result["hits"]}


async def integrity(runtime: Runtime) -> None:
    """The index holds exactly the searchable events (one docsize row each), and FTS5 finds it consistent."""
    if runtime.db.dialect.name == "postgresql":
        async with runtime.db.read() as tx:
            rows = await tx.fetchall("SELECT seq, type, summary, payload FROM events ORDER BY seq")
            texts = {r["seq"]: event_text(r["type"], r["summary"], json.loads(r["payload"])) for r in rows}
            bodies = {r["seq"]: r["body"] for r in await tx.fetchall("SELECT seq, body FROM event_search")}
        assert bodies == {seq: text for seq, text in texts.items() if text is not None} and bodies
        return
    async with runtime.db.write() as tx:
        await event_search.index_pending(tx, int(await tx.scalar("SELECT max(seq) FROM events")), at_least=1)
        indexed = [r[0] for r in await tx.fetchall("SELECT id FROM events_fts_docsize ORDER BY id")]
        searchable = [r[0] for r in await tx.fetchall("SELECT seq FROM event_search_docs ORDER BY seq")]
        assert indexed == searchable and indexed
        await tx.execute("INSERT INTO events_fts(events_fts) VALUES ('integrity-check')")


async def stdio_marker(workspace: Path, data_dir: Path, text: str) -> str:
    """A marker written by a server in its own process; returns that session's id."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--data-dir", str(data_dir)],
        env=dict(os.environ),
    )
    async with Client(params, mode="auto") as client:
        data(await client.call_tool("memory_write", {"target": "session_state", "content": text}))
        return str(data(await client.call_tool("session_get_snapshot", {}))["sessionId"])


async def test_a_marker_from_another_process_is_found_by_each_search(
    workspace: Path, tmp_path: Path, connect: Connect
) -> None:
    data_dir = tmp_path / "data"
    async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=data_dir)) as runtime:
        async with connect(runtime, "legacy") as client:  # the writer speaks the 2026 era
            before = await search(client, "session_search_context", query=MARKER)
            # written while this server is running: its index is the same file, current as soon as it commits
            writer = await stdio_marker(workspace, data_dir, f"deploy note {MARKER} for the release")
            context = data(await client.call_tool("session_search_context", {"query": MARKER}))
            traces = data(await client.call_tool("session_search_traces", {"query": MARKER}))
            merged = data(await client.call_tool("retrieval_search", {"query": MARKER}))
        await integrity(runtime)
    assert before["count"] == 0
    assert context["agentId"] == "default" and context["count"] >= 1
    top = context["hits"][0]
    assert top["sessionId"] == writer and top["backend"] == "session_context"
    assert top["source"] in ("span.started", "span.completed") and MARKER in top["snippet"]
    assert "identifier-match:1" in top["reasons"] and "source:" + top["source"] + "+2" in top["reasons"]
    assert top["expansion"] == {
        "tool": "session_get_trace",
        "args": {"sessionId": writer, "wakeId": top["wakeId"]},
        "rationale": top["expansion"]["rationale"],
    }
    assert top["setupMatch"] is True and "setup-match+2" in top["reasons"]
    trace = traces["hits"][0]
    assert traces["count"] == 1 and trace["sessionId"] == writer and trace["wakeId"] == top["wakeId"]
    assert trace["eventCount"] >= 4 and "span.completed" in trace["eventTypes"]
    assert trace["latestSummary"] == "Disconnected" and trace["expansion"]["tool"] == "session_get_trace"
    assert {h["backend"] for h in merged["hits"]} == {"memory", "session_context", "session_trace"}
    assert hit_sessions(merged) == {writer}
    summary = {s["backend"]: s for s in merged["backendSummary"]}
    assert list(summary) == ["memory", "session_context", "session_trace"]
    assert all(s["available"] and s["count"] >= 1 and s["topScore"] > 0 for s in summary.values())
    assert merged["expansionPlan"][0]["supportCount"] >= 1


async def test_never_another_agents_events(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    data_dir = tmp_path / "data"
    beta = ServeConfig.build(workspace=workspace, data_dir=data_dir, agent="beta")
    async with open_runtime(beta) as runtime, connect(runtime) as client:
        data(await client.call_tool("memory_write", {"target": "session_state", "content": MARKER}))
    default = ServeConfig.build(workspace=workspace, data_dir=data_dir)
    async with open_runtime(default) as runtime, connect(runtime) as client:
        for tool in SEARCHES:
            found = data(await client.call_tool(tool, {"query": MARKER, "includeCurrent": True}))
            assert found["count"] == 0, tool
    async with open_runtime(beta) as runtime, connect(runtime) as client:
        for tool in SEARCHES:
            assert data(await client.call_tool(tool, {"query": MARKER}))["count"] >= 1, tool


@pytest.mark.parametrize("mode", ERAS)
async def test_include_current(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        data(await client.call_tool("memory_write", {"target": "working_buffer", "content": MARKER}))
        mine = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        for tool in SEARCHES:
            quiet = await search(client, tool, query=MARKER)
            # memory always covers the current session (as memory_search does); the event backends do not
            assert not [h for h in quiet["hits"] if h.get("backend", "") != "memory"], tool
            found = await search(client, tool, query=MARKER, includeCurrent=True)
            assert hit_sessions(found) == {mine}, tool
            assert all(h["sessionRelation"] is None for h in found["hits"])


async def seed(
    runtime: Runtime, session_id: str, event_type: str, payload: dict[str, Any], wake_id: str | None = None
) -> None:
    async with runtime.db.write() as tx:
        await events.append_event(tx, session_id, wake_id, event_type, payload)


@pytest.mark.parametrize("mode", ERAS)
async def test_lineage_over_parent_and_child_rows(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with runtime.db.write() as tx:
        parent = await sessions.create_session(tx, "default", title="parent")
        current = await sessions.create_session(tx, "default", parent_id=parent.id, title="current")
        sibling = await sessions.create_session(tx, "default", parent_id=parent.id, title="sibling")
        child = await sessions.create_session(tx, "default", parent_id=current.id, title="child")
        stranger = await sessions.create_session(tx, "default", title="stranger")
    for record in (parent, sibling, child, stranger):
        async with runtime.db.write() as tx:
            wake = await sessions.open_wake(tx, record.id, transport="stdio", setup_fingerprint="0" * 64)
        await seed(
            runtime, record.id, "user.define_outcome", {"title": f"ship {MARKER}", "successCriteria": []}, wake.id
        )
    expected = {
        "parent": {parent.id},
        "children": {child.id},
        "siblings": {sibling.id},
        "related": {parent.id, child.id, sibling.id},
        None: {parent.id, child.id, sibling.id, stranger.id},
    }
    async with connect(runtime, mode, session_id=current.id) as client:
        for lineage, wanted in expected.items():
            args: dict[str, Any] = {"query": MARKER, "limit": 20}
            if lineage is not None:
                args["lineage"] = lineage
            for tool in SEARCHES:
                found = data(await client.call_tool(tool, args))
                assert hit_sessions(found) == wanted, (tool, lineage)
        ranked = data(await client.call_tool("session_search_context", {"query": MARKER}))
    relations = [h["sessionRelation"] for h in ranked["hits"]]
    assert relations[:3] == ["parent", "child", "sibling"] or set(relations[:2]) == {"parent", "child"}
    assert relations[-1] is None  # the unrelated session: no relation boost, last
    assert {h["expansion"]["tool"] for h in ranked["hits"]} == {"agent_compare_setup"}  # all under another setup


async def test_types_filter(runtime: Runtime, connect: Connect) -> None:
    async with runtime.db.write() as tx:
        other = await sessions.create_session(tx, "default")
    await seed(runtime, other.id, "permission.decided", {"toolName": "shell_run", "allowed": False, "note": MARKER})
    await seed(runtime, other.id, "user.define_outcome", {"title": MARKER, "successCriteria": []})
    async with connect(runtime) as client:
        every = data(await client.call_tool("session_search_context", {"query": MARKER}))
        only = await search(client, "session_search_context", query=MARKER, types=["permission.decided"])
        none = data(await client.call_tool("session_search_context", {"query": MARKER, "types": ["no.such"]}))
    assert {h["source"] for h in every["hits"]} == {"permission.decided", "user.define_outcome"}
    assert [h["source"] for h in only["hits"]] == ["permission.decided"]
    assert none["count"] == 0
    hit = only["hits"][0]  # an event outside any wake: read the events around it
    assert hit["expansion"]["tool"] == "session_get_events" and hit["setupMatch"] is None
    around = {"sessionId": other.id, "aroundEventId": hit["eventId"], "beforeLimit": 2, "afterLimit": 2}
    assert hit["expansion"]["args"] == around


@pytest.mark.parametrize("mode", ERAS)
async def test_span_events_of_one_wake_do_not_crowd_out_the_rest(runtime: Runtime, connect: Connect, mode: str) -> None:
    """Issue 38, item 15: a wake's calls leave two span events each, all expanding to the same trace; unasked,
    one of them stands for the wake and the outcome it defined is found beside it."""
    async with connect(runtime, mode) as client:
        for n in range(6):
            data(await client.call_tool("memory_write", {"target": "session_state", "content": f"{MARKER} {n}"}))
        data(await client.call_tool("outcome_define", {"title": f"{MARKER} shipped"}))
        found = data(await client.call_tool("session_search_context", {"query": MARKER, "includeCurrent": True}))
        spans = data(
            await client.call_tool(
                "session_search_context", {"query": MARKER, "includeCurrent": True, "types": ["span.started"]}
            )
        )
    sources = [h["source"] for h in found["hits"]]
    assert sum(source.startswith("span.") for source in sources) == 1 and "user.define_outcome" in sources
    assert spans["count"] == 7  # asked for by type: every one of them


async def test_ranking_follows_the_reference(runtime: Runtime, connect: Connect) -> None:
    async with runtime.db.write() as tx:
        same = await sessions.create_session(tx, "default")
        moved = await sessions.create_session(tx, "default")
        await sessions.open_wake(tx, same.id, transport="stdio", setup_fingerprint=setup_fingerprint(runtime))
        await sessions.open_wake(tx, moved.id, transport="stdio", setup_fingerprint="0" * 64)
    for text in ("alpha beta gamma", "alpha only", "alpha gamma beta", "ran build_7", "touched src/app.py"):
        await seed(runtime, same.id, "user.define_outcome", {"title": text, "successCriteria": []})
    await seed(runtime, moved.id, "user.define_outcome", {"title": "alpha beta gamma", "successCriteria": []})
    await seed(runtime, same.id, "user.define_outcome", {"title": "alpha again", "successCriteria": []})
    async with connect(runtime) as client:
        found = data(await client.call_tool("session_search_context", {"query": 'alpha "beta gamma"', "limit": 10}))
        structured = data(await client.call_tool("session_search_context", {"query": "src/app.py build_7"}))
    order = [(h["snippet"], h["sessionId"], h["score"]) for h in found["hits"]]
    # The phrase (+4) and a term (+1) beat a term; the same setup (+2) beats another setup; equal scores go newest
    # first. Every event scores +2 as an event.
    assert order[0] == ("alpha beta gamma", same.id, 4 + 1 + 2 + 2)
    assert order[1] == ("alpha beta gamma", moved.id, 4 + 1 + 2)
    assert sorted(o[0] for o in order[2:]) == ["alpha again", "alpha gamma beta", "alpha only"]
    assert {o[2] for o in order[2:]} == {1 + 2 + 2}
    created = [h["createdAt"] for h in found["hits"][2:]]
    assert created == sorted(created, reverse=True)
    # A path (+5, and its three words) beats an identifier (+3, and its word).
    assert [h["snippet"] for h in structured["hits"]] == ["touched src/app.py", "ran build_7"]
    assert [h["score"] for h in structured["hits"]] == [5 + 3 + 4, 3 + 1 + 4]
    assert "exact-phrase:1" in found["hits"][0]["reasons"] and "term-overlap:1" in found["hits"][0]["reasons"]
    foreign_setup = found["hits"][1]
    assert foreign_setup["setupMatch"] is False and "setup-differs" in foreign_setup["reasons"]
    assert foreign_setup["expansion"]["tool"] == "agent_compare_setup"
    assert foreign_setup["expansion"]["args"] == {"sessionId": moved.id}


async def test_search_spans_are_not_indexed_but_results_of_writing_tools_are(
    runtime: Runtime, connect: Connect
) -> None:
    async with connect(runtime) as client:
        data(await client.call_tool("session_search_context", {"query": "kiwi-searched-7"}))
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "plain text"}))
        data(await client.call_tool("shell_set_env", {"key": "TOKEN", "value": "hidden-value-9"}))
        logged = data(await client.call_tool("session_get_events", {"types": ["span.completed"], "limit": 10}))
        mine = await search(client, "session_search_context", query="kiwi-searched-7", includeCurrent=True)
        secret = await search(client, "session_search_context", query="hidden-value-9", includeCurrent=True)
        result = await search(client, "session_search_context", query="contentHash plain", includeCurrent=True)
    completed = {e["payload"]["toolName"]: e["payload"] for e in logged["events"]}
    assert "resultSummary" not in completed["session_search_context"]  # a reading tool's result is not kept
    assert "resultSummary" not in completed["shell_set_env"]  # nor one with hidden arguments
    assert completed["memory_write"]["resultSummary"].startswith('{"sessionId"')
    assert len(completed["memory_write"]["resultSummary"]) <= 300
    assert mine["count"] == 0 and secret["count"] == 0
    assert result["hits"][0]["source"] == "span.completed"
    await integrity(runtime)


async def test_retrieval_search_backends_vector_and_stalled_outcome(runtime: Runtime, connect: Connect) -> None:
    async with runtime.db.write() as tx:
        other = await sessions.create_session(tx, "default")
    await seed(runtime, other.id, "permission.decided", {"toolName": "shell_run", "allowed": False, "note": "otter-77"})
    async with connect(runtime) as client:
        data(await client.call_tool("outcome_define", {"title": f"ship {MARKER}", "successCriteria": ["tests pass"]}))
        data(await client.call_tool("outcome_evaluate", {}))
        data(await client.call_tool("outcome_evaluate", {}))  # the same verdict again: the trend is stable
        only = await search(
            client, "retrieval_search", query=MARKER, includeCurrent=True, backends=["vector", "session_context"]
        )
        every = data(await client.call_tool("retrieval_search", {"query": MARKER, "includeCurrent": True}))
        elsewhere = data(await client.call_tool("retrieval_search", {"query": "otter-77"}))
        snapshot = data(await client.call_tool("session_get_snapshot", {}))
    vector = only["backendSummary"][0]
    assert (vector["backend"], vector["available"], vector["count"], vector["topScore"]) == ("vector", False, 0, None)
    assert "No vector provider" in vector["note"]
    assert {h["backend"] for h in only["hits"]} == {"session_context"}
    assert snapshot["outcomeTrend"] == "stable" and not snapshot["promotionReady"]
    # The current outcome has stalled: its history leads the plan, though no hit pointed there.
    assert hit_sessions(elsewhere) == {other.id}
    first = elsewhere["expansionPlan"][0]
    assert first["tool"] == "outcome_history" and first["args"]["sessionId"] == snapshot["sessionId"]
    assert first["supportCount"] == 0 and "Stable" in first["rationale"]
    assert elsewhere["expansionPlan"][1]["tool"] == "session_get_events"
    merged = [h for h in every["hits"] if len(h["evidence"]) > 1]
    for hit in merged:  # one anchor found by several sources: max score + one per further source
        assert hit["score"] == max(e["score"] for e in hit["evidence"]) + len(hit["evidence"]) - 1
        assert hit["confidence"] == "high"


@pytest.mark.parametrize("mode", ERAS)
async def test_bad_queries_are_one_clear_error(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        for tool in SEARCHES:
            text = error_text(await client.call_tool(tool, {"query": "the a of"}))
            assert text == "The query has no searchable words (stopwords and one-letter words are ignored).", tool
            assert "lineage" in error_text(await client.call_tool(tool, {"query": "x1", "lineage": "cousins"}))
        web = await client.call_tool("retrieval_search", {"query": "x1", "backends": ["web"]})
        assert "backends" in error_text(web)
        # FTS syntax in the query is only ever text
        odd = data(await client.call_tool("session_search_context", {"query": 'NEAR(a b) OR "x" * body:y'}))
    assert odd["count"] == 0


async def old_session(tx: Tx) -> sessions.SessionRecord:
    """A session as the code before the sessions' `owner` column wrote it."""
    now = utc_now()
    record = sessions.SessionRecord(
        id=uuid7(), agent_id="default", owner="", parent_id=None, title=None, status="idle", stop_reason=None,
        created_at=now, updated_at=now, last_activity_at=now,
    )  # fmt: skip
    await tx.execute(
        "INSERT INTO sessions (id, agent_id, created_at, updated_at, last_activity_at) VALUES (?, ?, ?, ?, ?)",
        (record.id, record.agent_id, now, now, now),
    )
    return record


async def test_the_migration_indexes_an_existing_database(
    workspace: Path, tmp_path: Path, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = next(i for i, m in enumerate(MIGRATIONS) if m[1] == "the full-text index of events")
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    monkeypatch.setattr(db_module, "MIGRATIONS", MIGRATIONS[:index])
    old = await Database.open(config.state_path)
    try:
        async with old.write() as tx:
            record = await old_session(tx)
            wake = await sessions.open_wake(tx, record.id, transport="stdio", setup_fingerprint="f" * 64)
            payload = {"toolName": "write", "args": {"path": "notes.md", "content": f"old {MARKER}"}}
            # As the store of that schema appended it (today's store also keeps tables of later migrations).
            await tx.execute(
                "INSERT INTO events (id, session_id, wake_id, type, created_at, payload) VALUES (?, ?, ?, ?, ?, ?)",
                ("e-old", record.id, wake.id, "span.started", "2026-01-01T00:00:00.000Z", json.dumps(payload)),
            )
            assert await tx.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'events_fts'") == 0
    finally:
        await old.close()
    monkeypatch.setattr(db_module, "MIGRATIONS", MIGRATIONS)
    async with open_runtime(config) as runtime:
        async with connect(runtime) as client:
            found = data(await client.call_tool("session_search_context", {"query": MARKER}))
        await integrity(runtime)
    assert [h["sessionId"] for h in found["hits"]] == [record.id]
    assert found["hits"][0]["wakeId"] == wake.id
    assert found["hits"][0]["expansion"]["tool"] == "agent_compare_setup"  # it ran under another setup


async def test_an_append_after_another_connections_schema_change_is_indexed(runtime: Runtime) -> None:
    """SQLite 3.40 fails the first append after another connection's schema change ("no such table: events",
    compiling the index's trigger on a stale schema); the statement is run once more."""
    if runtime.db.dialect.name != "sqlite":
        pytest.skip("a quirk of SQLite's schema reloading")
    async with runtime.db.write() as tx:
        record = await sessions.create_session(tx, "default")
    async with runtime.db.write() as tx:  # another connection changes the schema
        await tx.execute("CREATE TABLE unrelated (id INTEGER PRIMARY KEY)")
    await runtime.db.record(
        lambda tx: events.append_event(tx, record.id, None, "user.note", {"text": f"after {MARKER}"})
    )
    await integrity(runtime)
    async with runtime.db.read() as tx:
        assert await tx.scalar("SELECT count(*) FROM events_fts WHERE events_fts MATCH ?", (f'"{MARKER}"',)) == 1


async def test_an_argument_holding_a_nul_is_recorded_and_found(runtime: Runtime, connect: Connect) -> None:
    """PostgreSQL refuses NUL in text: the call's span (its arguments indexed for search) once failed the whole
    request before the tool could refuse the path itself."""
    async with connect(runtime) as client:
        refused = await client.call_tool("read", {"path": f"{MARKER}\x00notes.md"})
        found = data(await client.call_tool("session_search_context", {"query": MARKER, "includeCurrent": True}))
    assert "NUL byte" in error_text(refused)
    assert found["count"] >= 1 and found["hits"][0]["source"] in ("span.started", "span.completed")
