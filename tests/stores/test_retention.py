"""Retention of tool spans (config.json `retention`): old wakes are compacted into their trace summary, the event
index forgets what went, and everything else stays."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import Connect, data

from managed_tools.server.config.serve_config import ConfigError, ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import event_search, events, retention, sessions
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio
CALLS = 5  # per wake: ten span events


async def three_wakes(runtime: Runtime, connect: Connect) -> tuple[str, list[str]]:
    """One session attached three times, CALLS calls each (the first writes a marker); its id and its wakes."""
    session: str | None = None
    for n in range(3):
        async with connect(runtime, session_id=session) as client:
            snapshot = data(await client.call_tool("session_get_snapshot", {}))
            session = snapshot["sessionId"]
            await client.call_tool("memory_write", {"target": "session_state", "content": f"kiwi-{n} noted"})
            for _ in range(CALLS - 2):
                await client.call_tool("memory_read", {"target": "session_state"})
    assert session is not None
    async with runtime.db.read() as tx:
        rows = await tx.fetchall("SELECT id FROM wakes WHERE session_id = ? ORDER BY started_at", (session,))
    return session, [r["id"] for r in rows]


async def spans_by_wake(runtime: Runtime) -> dict[str, list[str]]:
    async with runtime.db.read() as tx:
        rows = await tx.fetchall(
            "SELECT wake_id, type FROM events WHERE type IN ('span.started', 'span.completed', 'trace.compacted') "
            'AND payload NOT LIKE \'%"spanKind":"wake"%\' ORDER BY seq'
        )
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["wake_id"], []).append(row["type"])
    return found


@pytest.mark.both_backends
async def test_wakes_behind_the_newest_events_of_their_session_are_compacted(
    runtime: Runtime, connect: Connect
) -> None:
    session, wakes = await three_wakes(runtime, connect)
    removed = await retention.apply(runtime.db, retention.Retention(max_per_session=4))
    spans = await spans_by_wake(runtime)
    assert removed >= 4 * CALLS
    assert spans[wakes[0]] == spans[wakes[1]] == ["trace.compacted"]
    assert "trace.compacted" not in spans[wakes[2]] and len(spans[wakes[2]]) >= 2 * CALLS
    async with runtime.db.read() as tx:
        payload = json.loads(
            await tx.scalar("SELECT payload FROM events WHERE type = 'trace.compacted' AND wake_id = ?", (wakes[0],))
        )
    assert payload["calls"] == CALLS and payload["results"] == {"success": CALLS}
    assert payload["tools"] == {"memory_read": CALLS - 2, "session_get_snapshot": 1, "memory_write": 1}
    assert await retention.apply(runtime.db, retention.Retention(max_per_session=4)) == 0  # nothing more to do
    async with connect(runtime, session_id=session) as client:
        found = data(await client.call_tool("session_search_context", {"query": "kiwi-0", "includeCurrent": True}))
        traces = data(await client.call_tool("session_list_traces", {}))
    assert found["count"] == 0  # its call went with its spans (the memory itself stays: memory_search finds it)
    assert {t["wakeId"] for t in traces["traces"]} >= set(wakes)  # every wake still listed, by its summary


async def test_old_wakes_go_by_age_and_the_index_stays_whole(runtime: Runtime, connect: Connect) -> None:
    _, wakes = await three_wakes(runtime, connect)
    policy = retention.Retention(max_age_days=30)
    assert await retention.apply(runtime.db, policy) == 0  # nothing is 30 days old yet
    later = datetime.now(UTC) + timedelta(days=31)
    assert await retention.apply(runtime.db, policy, now=later) == 0  # this clock alone does not age the state
    async with runtime.db.write() as tx:  # the state moves on: another session's event, 31 days on
        other = await sessions.create_session(tx, "default")
        await events.append_event(tx, other.id, None, "user.note", {}, created_at=retention.iso(later))
    assert await retention.apply(runtime.db, policy, now=later) >= 6 * CALLS
    spans = await spans_by_wake(runtime)
    assert all(spans[wake] == ["trace.compacted"] for wake in wakes)
    async with runtime.db.write() as tx:  # FTS5 checks its index against the events that remain
        last = int(await tx.scalar("SELECT max(seq) FROM events"))
        await event_search.index_pending(tx, last, at_least=1)
        await tx.execute("INSERT INTO events_fts(events_fts) VALUES ('integrity-check')")


def test_the_policy_is_read_from_config_json_and_checked(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    config_file = data_dir / "config.json"
    config_file.write_text(json.dumps({"retention": {"eventsMaxAgeDays": 90, "eventsMaxPerSession": 5000}}))
    config = ServeConfig.build(workspace=workspace, data_dir=data_dir)
    assert config.retention.policy() == retention.Retention(max_age_days=90, max_per_session=5000)
    config_file.write_text(json.dumps({"retention": {"eventsMaxAgeDay": 90}}))
    with pytest.raises(ConfigError, match="did you mean 'eventsMaxAgeDays'"):
        ServeConfig.build(workspace=workspace, data_dir=data_dir)
    config_file.write_text(json.dumps({"retention": {"eventsMaxAgeDays": 0}}))
    with pytest.raises(ConfigError, match=r"retention\.eventsMaxAgeDays"):
        ServeConfig.build(workspace=workspace, data_dir=data_dir)


async def test_the_policy_applies_at_start_up(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    data_dir = tmp_path / "data"
    config = ServeConfig.build(workspace=workspace, data_dir=data_dir)
    async with open_runtime(config) as runtime:
        _, wakes = await three_wakes(runtime, connect)
    (data_dir / "config.json").write_text(json.dumps({"retention": {"eventsMaxPerSession": 10}}))
    async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=data_dir)) as runtime:
        spans = await spans_by_wake(runtime)
    assert spans[wakes[0]] == ["trace.compacted"]
