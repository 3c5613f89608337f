"""A soak: one real `managed-tools serve` process over stdio under a fixed load for `--minutes`, its RSS, open fds,
WAL and state size printed as a series (issue 39 item 6: does RSS level off, or keep rising as the 60-s load runs
suggested, 7-13 MB per server per minute?).

The load is a fixed rate (`--rate` calls a second, spread over the loop): memory writes and reads, a file read and
a shell run, in turn, in one session. Every `--every` seconds a row: elapsed, RSS (MB), open fds, WAL (MB), state
(MB; the data dir's state.db, or the PostgreSQL database's size), calls done. At the end the RSS slope in MB/min
over the last two thirds of the rows (a least-squares fit), beside the slope of the first third: the baseline that
shows what start-up and warm-up add. `--engine both` runs the two engines at once, on a throwaway PostgreSQL
cluster (tests/support/postgres_server.py) for the second. A benchmark, not a test: it prints and exits 0.

    python bench/soak.py [--minutes 30] [--engine sqlite|postgresql|both] [--rate 20] [--every 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.postgres_server import cluster

MAX_MINUTES = 240.0  # bounded: a typo of 3000 does not run for two days


@dataclass
class Series:
    engine: str
    rows: list[dict[str, float]] = field(default_factory=list)
    calls: int = 0
    errors: int = 0


def _server_pid(client_pid: int, command_tail: str) -> int | None:
    """The `serve` process this run started: the one whose command line ends with our unique data dir."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == client_pid:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if " serve " in cmdline and command_tail in cmdline:
            return int(entry.name)
    return None


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _file_mb(path: Path) -> float:
    return path.stat().st_size / 2**20 if path.exists() else 0.0


async def _pg_mb(url: str) -> float:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return float(await conn.fetchval("SELECT pg_database_size(current_database())")) / 2**20
    finally:
        await conn.close()


def slope(rows: list[dict[str, float]]) -> float:
    """MB per minute, least squares of RSS over elapsed."""
    if len(rows) < 2:
        return 0.0
    xs = [r["minute"] for r in rows]
    ys = [r["rssMb"] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


async def soak(engine: str, database: str | None, minutes: float, rate: float, every: float) -> Series:
    series = Series(engine)
    with tempfile.TemporaryDirectory(prefix=f"soak-{engine}-") as tmp:
        workspace, data_dir = Path(tmp) / "workspace", Path(tmp) / "data"
        workspace.mkdir()
        (workspace / "notes.txt").write_text("a line of a file the soak reads\n" * 100)
        args = ["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--data-dir", str(data_dir)]
        if database is not None:
            args += ["--database", database]
        params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
        state, wal = data_dir / "state.db", data_dir / "state.db-wal"
        calls: list[tuple[str, dict[str, Any]]] = [
            ("memory_write", {"target": "working_buffer", "content": "soak " * 200}),
            ("memory_read", {"target": "working_buffer"}),
            ("read", {"path": "notes.txt"}),
            ("bash", {"command": "ls", "args": ["-a"]}),  # the confined read-only hand: it runs without asking
        ]
        async with Client(params) as client:
            pid = _server_pid(os.getpid(), str(data_dir))
            if pid is None:
                raise SystemExit("soak: could not find the server process")
            started = time.monotonic()
            end = started + minutes * 60
            next_row = started
            while (now := time.monotonic()) < end:
                if now >= next_row:
                    size = _file_mb(state) if database is None else await _pg_mb(database)
                    row = {
                        "minute": round((now - started) / 60, 2),
                        "rssMb": round(_rss_mb(pid), 1),
                        "fds": float(len(os.listdir(f"/proc/{pid}/fd"))),
                        "walMb": round(_file_mb(wal), 2),
                        "stateMb": round(size, 2),
                        "calls": float(series.calls),
                    }
                    series.rows.append(row)
                    print(engine, json.dumps(row), file=sys.stderr, flush=True)
                    next_row += every
                name, arguments = calls[series.calls % len(calls)]
                result = await client.call_tool(name, arguments)
                series.calls += 1
                series.errors += bool(result.is_error)
                await anyio.sleep(max(0.0, started + series.calls / rate - time.monotonic()))
    return series


async def main(ns: argparse.Namespace) -> None:
    engines = ["sqlite", "postgresql"] if ns.engine == "both" else [ns.engine]
    results: list[Series] = []
    with ExitStack() as stack:
        urls = {e: (stack.enter_context(cluster()).url if e == "postgresql" else None) for e in engines}

        async def one(engine: str) -> None:
            results.append(await soak(engine, urls[engine], ns.minutes, ns.rate, ns.every))

        async with anyio.create_task_group() as tg:
            for engine in engines:
                tg.start_soon(one, engine)
    report: list[dict[str, Any]] = []
    for s in sorted(results, key=lambda r: r.engine):
        third = max(1, len(s.rows) // 3)
        report.append(
            {
                "engine": s.engine,
                "calls": s.calls,
                "errors": s.errors,
                "rssSlopeFirstThirdMbPerMin": round(slope(s.rows[: third + 1]), 3),
                "rssSlopeLastTwoThirdsMbPerMin": round(slope(s.rows[third:]), 3),
                "series": s.rows,
            }
        )
    if ns.json:
        print(json.dumps(report, indent=2))
        return
    for r in report:
        print(f"## {r['engine']}: {r['calls']} calls, {r['errors']} errors")
        print("| minute | RSS MB | fds | WAL MB | state MB | calls |")
        print("|---|---|---|---|---|---|")
        for row in r["series"]:
            print(
                f"| {row['minute']} | {row['rssMb']} | {int(row['fds'])} | {row['walMb']} | {row['stateMb']} "
                f"| {int(row['calls'])} |"
            )
        print(
            f"RSS slope: first third {r['rssSlopeFirstThirdMbPerMin']} MB/min (warm-up, the baseline); "
            f"last two thirds {r['rssSlopeLastTwoThirdsMbPerMin']} MB/min\n"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--rate", type=float, default=20.0, help="calls a second")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between rows")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    if not 0 < ns.minutes <= MAX_MINUTES or not 0 < ns.rate <= 1000 or not 1 <= ns.every <= 600:
        parser.error(f"--minutes in (0, {MAX_MINUTES}], --rate in (0, 1000], --every in [1, 600]")
    anyio.run(main, ns)
