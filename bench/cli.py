"""How fast the terminal commands answer: the approval CLI (`pending`, `approve` of an unknown id), the views of what
agents did (`sessions`, `events`, `memory`, `outcomes`, `approvals`, `audit export`), `where` and `--version`,
against a bare `python -c "import pydantic, sqlite3"`, measured in the same run.

A person approving a paused call is on the agent's critical path; the target is each command within 5x of the
bare import (median). Every run is a fresh process, as a person's would be. The series are interleaved round by
round, so a burst of load on a shared machine touches them all alike. The state is a real SQLite state made by the
stores, with three waiting requests (one of a session whose client is attached). It is a benchmark, not a test:
the exit status is 0 whatever the figures are.

    python bench/cli.py [--rounds 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from managed_tools.stores import approvals, events, memory, sessions
from managed_tools.stores.db import Database
from managed_tools.stores.provenance import Provenance

TARGET_RATIO = 5.0
BASELINE = "python -c 'import pydantic, sqlite3'"


def command() -> list[str]:
    """The installed `managed-tools` script beside this interpreter (what a person runs), else `-m`."""
    script = Path(sys.executable).with_name("managed-tools")
    return [str(script)] if script.exists() else [sys.executable, "-m", "managed_tools.server"]


async def seed(data_dir: Path) -> None:
    """A state with three sessions, each with an open request as a paused call leaves it, 400 events and ten
    versions of its session_state."""
    db = await Database.open(data_dir / "state.db", local_dir=data_dir)
    try:
        async with db.write() as tx:
            for n in range(3):
                session = await sessions.create_session(tx, "default", owner=sessions.LOCAL_OWNER)
                wake = await sessions.open_wake(tx, session.id, transport="stdio", setup_fingerprint="bench")
                if n:  # the first stays attached (this process is alive while the bench runs)
                    await sessions.close_wake(tx, wake.id)
                await approvals.create(
                    tx, session_id=session.id, wake_id=wake.id, kind="tool_confirmation", tool_name="bash",
                    arguments={"command": f"make test-{n}"}, args_digest=f"{n:064x}", channel="out_of_band",
                    question=f"Run this command?\n\nmake test-{n}",
                )  # fmt: skip
                for call in range(200):  # a working session's log and memory, for the views to read
                    started = {"toolName": "shell_run", "args": {"command": f"make test-{call}"}}
                    await events.append_event(tx, session.id, wake.id, "span.started", started)
                    completed = {"toolName": "shell_run", "result": "success", "durationMs": 12.5}
                    await events.append_event(tx, session.id, wake.id, "span.completed", completed, summary="ok")
                    if call % 20 == 0:
                        await memory.write(
                            tx, scope=session.id, target="session_state", agent_id="default", session_id=session.id,
                            wake_id=wake.id, content=f"step {call} done", mode="replace", source="bench",
                            searchable_title="session_state", provenance=Provenance(),
                        )  # fmt: skip
    finally:
        await db.close()


def series(workspace: Path, data_dir: Path) -> dict[str, list[str]]:
    cli, place = command(), ["--workspace", str(workspace), "--data-dir", str(data_dir)]
    return {
        "baseline": [sys.executable, "-c", "import pydantic, sqlite3"],
        "pending": [*cli, "pending", *place],
        "approve (unknown id)": [*cli, "approve", "0193f2c1-7d4e-7b55-9f3e-2a1c9d8e4b10", *place],
        "sessions": [*cli, "sessions", *place],
        "events": [*cli, "events", *place],
        "memory": [*cli, "memory", *place],
        "outcomes": [*cli, "outcomes", *place],
        "approvals --all": [*cli, "approvals", "--all", *place],
        "audit export": [*cli, "audit", "export", *place],
        "where": [*cli, "where", *place],
        "tools": [*cli, "tools", *place],
        "--version": [*cli, "--version"],
    }


def measure(argvs: dict[str, list[str]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for number in range(rounds + 1):
        for name, argv in argvs.items():
            start = time.perf_counter()
            subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False, timeout=120)
            if number:  # round 0 warms the file cache and writes the bytecode caches
                times[name].append(time.perf_counter() - start)
        print(f"round {number}/{rounds}", end="\r", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return times


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30, help="timed runs of each command (default: 30)")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON document on stdout")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="managed-tools-bench-cli-"))
    try:
        workspace, data_dir = tmp / "workspace", tmp / "data"
        workspace.mkdir()
        data_dir.mkdir()
        os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")  # no person's user config or skills
        anyio.run(seed, data_dir)
        times = measure(series(workspace, data_dir), args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = figures(times)
    if args.json:
        print(json.dumps({"baseline": BASELINE, "rounds": args.rounds, "target_ratio": TARGET_RATIO, "rows": rows}))
        return 0
    print(f"{args.rounds} runs each, interleaved; ratio against {BASELINE} (target: median <= {TARGET_RATIO:g}x)\n")
    print_rows(rows)
    return 0


def figures(times: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Each command's median and p95, and both against the baseline's (bench/startup.py prints them too)."""
    base = statistics.median(times["baseline"])
    return [
        {"command": name, "median_ms": statistics.median(v) * 1000, "p95_ms": p95(v) * 1000,
         "ratio_median": statistics.median(v) / base, "ratio_p95": p95(v) / p95(times["baseline"])}
        for name, v in times.items()
    ]  # fmt: skip


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'command':<22} {'median':>9} {'p95':>9} {'x median':>9} {'x p95':>7}")
    for row in rows:
        verdict = (
            "" if row["command"] == "baseline" else ("  met" if row["ratio_median"] <= TARGET_RATIO else "  NOT met")
        )
        print(
            f"{row['command']:<22} {row['median_ms']:>7.1f}ms {row['p95_ms']:>7.1f}ms "
            f"{row['ratio_median']:>8.2f}x {row['ratio_p95']:>6.2f}x{verdict}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
