"""The dashboard's reads (stores/overview.py) on a real store, both engines: refusals of each kind, grades in
order with their levels, a version's diff against the one before it, and the event window by sequence number."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Connect, data

from managed_tools.stores import events, memory, overview, sessions
from managed_tools.stores.ids import uuid7
from managed_tools.stores.provenance import Provenance
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


async def test_refusals_grades_diffs_and_the_event_window(runtime: Runtime) -> None:
    async with runtime.db.write() as tx:
        session = await sessions.create_session(tx, "default")
        first = await events.append_event(tx, session.id, None, "span.started", {"toolName": "shell_run"})
        blocked = "exit 7\n[managed-tools] network blocked: evil.example:443 (not in the allowlist)\n"
        await events.append_event(
            tx,
            session.id,
            None,
            "span.completed",
            {"toolName": "shell_run", "result": "success", "resultSummary": blocked},
        )
        await events.append_event(
            tx, session.id, None, "permission.decided", {"toolName": "probe_danger", "allowed": False, "by": "cli"}
        )
        await events.append_event(
            tx, session.id, None, "permission.decided", {"toolName": "probe_danger", "allowed": True, "by": "cli"}
        )
        for second, status in enumerate(("blocked", "in_progress", "done_candidate")):
            await tx.execute(
                "INSERT INTO outcome_evaluations (id, session_id, wake_id, fingerprint, iteration, evaluated_at, "
                "outcome_title, grade_status, evaluation) VALUES (?, ?, NULL, 'f', 0, ?, 'ship it', ?, '{}')",
                (uuid7(), session.id, f"2026-11-26T10:00:0{second}.000Z", status),
            )
        scope = memory.agent_scope("default")
        for content in ("one\ntwo", "one\nthree"):
            await memory.write(
                tx,
                scope=scope,
                target="workspace_memory",
                agent_id="default",
                session_id=session.id,
                wake_id=None,
                content=content,
                mode="replace",
                source="test",
                searchable_title="memory",
                provenance=Provenance(),
            )
    async with runtime.db.read() as tx:
        refused = await overview.refusals(tx)
        grades = await overview.grades(tx)
        versions = await overview.versions(tx)
        newest, oldest = [await overview.version_diff(tx, "memory", v.id) for v in versions if v.store == "memory"]
        window = await overview.events_after(tx, first.seq)
        missing = await overview.version_diff(tx, "substrate", uuid7())
    assert [(r.kind, r.tool) for r in refused] == [("denied", "probe_danger"), ("network", "shell_run")]
    assert refused[1].detail == "evil.example:443 (not in the allowlist)"
    assert [(g.status, g.level) for g in grades] == [("blocked", 0), ("in_progress", 1), ("done_candidate", 2)]
    assert newest is not None and "-two" in newest and "+three" in newest and " one" in newest
    assert oldest is not None and "+one" in oldest and "+two" in oldest  # a first version: all added
    assert missing is None
    assert [e.type for e in window] == ["span.completed", "permission.decided", "permission.decided"]
    assert window[0].tool == "shell_run" and window[0].seq > first.seq


async def test_the_sandboxs_own_refusals_are_shown(runtime: Runtime, connect: Connect, workspace: Path) -> None:
    """A path out of its mount is refused with kind `sandbox_refused`, and a command's refused destinations are
    kept whole in its completion (not only in its output, which a summary may cut): both are refusals here."""
    async with connect(runtime) as client:
        escaped = await client.call_tool("read", {"path": "../outside.txt"})
        session = str(data(await client.call_tool("session_get_snapshot", {}))["sessionId"])
    assert escaped.is_error and escaped.meta is not None
    assert escaped.meta["managed-tools/error"]["kind"] == "sandbox_refused"
    async with runtime.db.write() as tx:
        completed = {"toolName": "shell_run", "result": "success", "networkBlocked": ["evil.example:443 (not listed)"]}
        await events.append_event(tx, session, None, "span.completed", {**completed, "resultSummary": "x" * 300})
    async with runtime.db.read() as tx:
        refused = await overview.refusals(tx)
    assert [(r.kind, r.tool) for r in refused[:2]] == [("network", "shell_run"), ("sandbox_refused", "read")]
    assert refused[0].detail == "evil.example:443 (not listed)" and "outside" in refused[1].detail
