"""The terminal views of what agents did (`sessions`, `events`, `memory`, `outcomes`, `approvals`) and `audit
export`, over a state a real client made: lean (no MCP SDK, no catalogue), exact, bounded, and never showing an
argument's value in the default audit profile or a credential in any."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Connect, data
from test_approval_cli import PROBE, Ran, run

from managed_tools.server.cli.terminal import Column, Screen, table
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.stores import approvals, events
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

SECRET_ARG = "hunter2-plain-argument-value"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


class Acted:
    """A state two client sessions left: memory written three times, an outcome evaluated, a refused call."""

    def __init__(self, flags: tuple[str, ...], first: str, second: str, runtime: Runtime) -> None:
        self.flags, self.first, self.second, self.runtime = flags, first, second, runtime


@pytest.fixture
async def acted(runtime: Runtime, connect: Connect, config: ServeConfig) -> AsyncIterator[Acted]:
    async with connect(runtime) as client:
        first = str(data(await client.call_tool("session_get_snapshot", {}))["sessionId"])
        for text in ("plan: read the code", "plan: read the code\nthen fix the bug", SECRET_ARG + " " + TOKEN):
            await client.call_tool("memory_write", {"target": "session_state", "content": text, "mode": "replace"})
        await client.call_tool("outcome_define", {"title": "Fix the bug", "successCriteria": ["tests pass"]})
        await client.call_tool("outcome_evaluate", {})
        await client.call_tool("no_such_tool", {"x": SECRET_ARG})
    async with connect(runtime) as client:
        second = str(data(await client.call_tool("session_get_snapshot", {}))["sessionId"])
        await client.call_tool("memory_write", {"target": "session_state", "content": "other", "mode": "replace"})
    yield Acted(("--workspace", str(config.workspace), "--data-dir", str(config.data_dir)), first, second, runtime)


def view(tmp_path: Path, acted: Acted, *argv: str) -> Ran:
    ran = run(tmp_path, *argv, *acted.flags)
    assert ran.heavy() == [], ran.heavy()
    assert "managed_tools.stores.db" in ran.loaded  # the probe sees what it loads
    return ran


async def test_sessions_lists_each_session_with_its_status_events_and_grade(tmp_path: Path, acted: Acted) -> None:
    listed = view(tmp_path, acted, "sessions")
    assert listed.returncode == 0, listed.stderr
    heading, *rows = listed.stdout.splitlines()
    assert heading.split()[:6] == ["SESSION", "AGENT", "STATUS", "ACTIVE", "EVENTS", "GRADE"]
    shown = [row.split()[0] for row in rows]  # each id's shortest prefix no other row shares
    assert acted.second.startswith(shown[0]) and acted.first.startswith(shown[1])  # most recently active first
    assert len(shown[0]) >= 8 and not acted.first.startswith(shown[0]) and not acted.second.startswith(shown[1])
    as_json = json.loads(view(tmp_path, acted, "sessions", "--json").stdout)
    found = {s["sessionId"]: s for s in as_json["sessions"]}
    assert found[acted.first]["agentId"] == "default" and "lastActivityAt" in found[acted.first]
    assert as_json["total"] == 2 and found[acted.first]["grade"] is not None
    assert found[acted.first]["events"] >= 12  # six calls, two span events each
    limited = view(tmp_path, acted, "sessions", "--limit", "1")
    assert "… 1 more (--limit N shows more)" in limited.stdout


async def test_events_filter_by_session_prefix_and_type_and_keep_the_latest(tmp_path: Path, acted: Acted) -> None:
    prefix = acted.first[:13]
    done = json.loads(view(tmp_path, acted, "events", "--session", prefix, "--type", "span.completed", "--json").stdout)
    names = [e["payload"]["toolName"] for e in done["events"] if e["payload"]["spanKind"] == "tool"]
    assert (
        names[-1] == "no_such_tool"
        and "memory_write" in names
        and {e["type"] for e in done["events"]} == {"span.completed"}
    )
    last_two = view(tmp_path, acted, "events", "--session", prefix, "--limit", "2")
    lines = last_two.stdout.splitlines()
    assert len(lines) == 4 and lines[0].split()[:4] == ["SEQ", "TIME", "SESSION", "TYPE"], last_two.stdout
    assert "no_such_tool: error" in lines[1] and "span.completed  Disconnected" in lines[2]  # the wake's end
    assert lines[3].startswith("… ")
    ambiguous = view(tmp_path, acted, "events", "--session", "0")
    assert ambiguous.returncode == 1 and "more than one session" in ambiguous.stderr
    assert ambiguous.stderr.count("\n") == 1 and "Traceback" not in ambiguous.stderr
    for wildcard in ("%", "_", "0%"):  # taken literally, never as LIKE's wildcards
        literal = view(tmp_path, acted, "events", "--session", wildcard)
        assert literal.returncode == 1 and f"No session {wildcard!r}" in literal.stderr, literal.stderr


def follow(tmp_path: Path, acted: Acted) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", PROBE, "events", "--follow", "--json", "--session", acted.first, *acted.flags]
    env = {**os.environ, "LOADED": str(tmp_path / "loaded-follow")}
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def test_events_follow_prints_each_new_event_then_stops_quietly(tmp_path: Path, acted: Acted) -> None:
    follower = follow(tmp_path, acted)
    assert follower.stdout is not None
    try:
        first = json.loads(await anyio.to_thread.run_sync(follower.stdout.readline))  # the latest, a line each
        assert first["sessionId"] == acted.first
        async with acted.runtime.db.write() as tx:
            await events.append_event(tx, acted.first, None, "note.added", {}, summary="appended while following")
        seen: list[dict[str, Any]] = []
        with anyio.fail_after(20):
            while not any(e["type"] == "note.added" for e in seen):
                seen.append(json.loads(await anyio.to_thread.run_sync(follower.stdout.readline)))
        assert seen[-1]["summary"] == "appended while following"
    finally:
        follower.send_signal(signal.SIGINT)
        _, err = await anyio.to_thread.run_sync(lambda: follower.communicate(timeout=20))
    assert follower.returncode == 0 and err == "", err


async def test_memory_lists_shows_versions_and_diffs(tmp_path: Path, acted: Acted) -> None:
    listed = view(tmp_path, acted, "memory")
    assert listed.stdout.splitlines()[0].split()[:5] == ["TARGET", "SCOPE", "VERSIONS", "CHARS", "UPDATED"]
    ambiguous = view(tmp_path, acted, "memory", "show", "session_state")
    assert ambiguous.returncode == 1 and "--session ID" in ambiguous.stderr  # in both sessions
    one = ("--session", acted.first)
    shown = view(tmp_path, acted, "memory", "show", "session_state", *one)
    assert shown.returncode == 0 and shown.stdout.rstrip().endswith(SECRET_ARG + " " + TOKEN), shown.stdout
    versions = json.loads(view(tmp_path, acted, "memory", "show", "session_state", "--versions", "--json", *one).stdout)
    _, middle, oldest = [v["versionId"] for v in versions["versions"]]
    assert versions["total"] == 3
    diff = view(tmp_path, acted, "memory", "show", "session_state", "--diff", oldest[:30], middle, *one)
    assert diff.returncode == 0, diff.stderr
    assert "+then fix the bug" in diff.stdout and f"session_state@{oldest}" in diff.stdout
    unknown = view(tmp_path, acted, "memory", "show", "nothing_here", *one)
    assert unknown.returncode == 1 and "No memory 'nothing_here'" in unknown.stderr
    unknown_version = view(tmp_path, acted, "memory", "show", "session_state", "--diff", "zz", middle, *one)
    assert unknown_version.returncode == 1 and "memory show session_state --versions" in unknown_version.stderr
    wrong = view(tmp_path, acted, "memory", "--versions")
    assert wrong.returncode == 1 and "memory show TARGET --versions" in wrong.stderr


async def test_outcomes_show_the_latest_grade_and_one_sessions_history(tmp_path: Path, acted: Acted) -> None:
    listed = view(tmp_path, acted, "outcomes")
    assert "Fix the bug" in listed.stdout
    assert acted.first.startswith(listed.stdout.splitlines()[1].split()[0])
    history = json.loads(view(tmp_path, acted, "outcomes", "--session", acted.first, "--json").stdout)
    assert history["outcome"]["title"] == "Fix the bug" and len(history["evaluations"]) == 1
    text = view(tmp_path, acted, "outcomes", "--session", acted.first).stdout
    assert "Fix the bug: 1 criteria" in text and "  - tests pass" in text
    none = view(tmp_path, acted, "outcomes", "--session", acted.second)
    assert "has no outcome defined" in none.stdout


async def test_approvals_list_the_waiting_then_all_with_who_decided(tmp_path: Path, acted: Acted) -> None:
    async with acted.runtime.db.write() as tx:
        asked = await approvals.create(
            tx, session_id=acted.first, wake_id=None, kind="tool_confirmation", tool_name="shell_run",
            arguments={"command": "make deploy"}, args_digest="0" * 64, channel="out_of_band",
            question="Run this command?\n\nmake deploy",
        )  # fmt: skip
    waiting = view(tmp_path, acted, "approvals")
    shown = waiting.stdout.splitlines()[1]
    assert asked.id.startswith(shown.split()[0]) and "pending" in shown and "Run this command? make deploy" in shown
    assert view(tmp_path, acted, "deny", shown.split()[0], "--note", "not today").returncode == 0  # its prefix
    assert "No permission requests waiting." in view(tmp_path, acted, "approvals").stdout
    every = json.loads(view(tmp_path, acted, "approvals", "--all", "--json").stdout)
    assert [(a["requestId"], a["status"], a["decidedBy"], a["note"]) for a in every["approvals"]] == [
        (asked.id, "denied", "cli", "not today")
    ]


async def test_audit_export_shows_argument_shapes_only_unless_full(tmp_path: Path, acted: Acted) -> None:
    shaped = view(tmp_path, acted, "audit", "export")
    assert shaped.returncode == 0, shaped.stderr
    records = [json.loads(line) for line in shaped.stdout.splitlines()]
    assert SECRET_ARG not in shaped.stdout and TOKEN not in shaped.stdout
    started = [r for r in records if r["type"] == "span.started" and r["details"].get("toolName") == "memory_write"]
    shape = started[0]["details"]["argsShape"]
    assert {k: shape[k] for k in ("content", "mode", "target")} == {
        "content": "string(19)", "mode": "string(7)", "target": "string(13)"
    }  # fmt: skip
    assert all(r["agent"] == "default" for r in records) and [r["seq"] for r in records] == sorted(
        r["seq"] for r in records
    )
    full = view(tmp_path, acted, "audit", "export", "--full", "--session", acted.first[:13])
    assert SECRET_ARG in full.stdout  # the recorded preview, asked for
    assert TOKEN not in full.stdout and f"{SECRET_ARG} [secret redacted]" in full.stdout  # a credential: never
    assert {json.loads(line)["session"] for line in full.stdout.splitlines()} == {acted.first}


async def test_audit_export_as_csv_since_a_time(tmp_path: Path, acted: Acted) -> None:
    out = tmp_path / "audit.csv"
    written = view(tmp_path, acted, "audit", "export", "--format", "csv", "--since", "1h", "--output", str(out))
    assert written.returncode == 0 and written.stdout == "", written.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert rows and {"seq", "time", "tool", "result", "argsShape"} <= set(rows[0])
    assert any(r["tool"] == "no_such_tool" and r["result"] == "error" for r in rows)
    later = view(tmp_path, acted, "audit", "export", "--since", "2999-01-01")
    assert later.returncode == 0 and later.stdout == ""
    wrong = view(tmp_path, acted, "audit", "export", "--since", "yesterday")
    assert wrong.returncode == 1 and "--since takes a date" in wrong.stderr and "Traceback" not in wrong.stderr


def test_a_table_fits_the_terminal_by_cutting_its_free_text_column() -> None:
    screen = Screen(tty=True, width=40, height=24, colour=False)
    text = table(screen, [Column("ID"), Column("TEXT", flexible=True)], [["abc", "word " * 30], ["d", "short"]])
    lines = text.splitlines()
    assert all(len(line) <= 40 for line in lines) and lines[1].endswith("…") and lines[2] == "d    short"
    wide = Screen(tty=False, width=0, height=0, colour=False)
    assert "word " * 29 in table(wide, [Column("ID"), Column("TEXT", flexible=True)], [["abc", "word " * 30]])
    coloured = Screen(tty=True, width=80, height=24, colour=True)
    assert coloured.style("pass", "green") == "\x1b[32mpass\x1b[0m" and wide.style("pass", "green") == "pass"
