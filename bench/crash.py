"""The crash suite's long form: kill -9 a real stdio server at random moments of a mixed workload, N times.

Each round starts `managed-tools serve` (resuming one session), checks the state against everything the client
saw acknowledged so far (tests/support/crash_workload.py: integrity_check, memory versions, substrate versions and the
file agreeing with its history, granted approvals, completed shell commands), runs memory writes with CAS,
substrate promotions, shell commands and one `managed-tools approve` until a SIGKILL of the server's process group
after a random delay, and notes whether the kill left a pending substrate write for start-up to settle.

`--engine postgresql` (or `both`) runs the same rounds on a throwaway PostgreSQL cluster
(tests/support/postgres_server.py) and checks its rows; `--pg-restart-at K` stops and starts that cluster once in the
middle of round K, while the server is connected and working (calls refused meanwhile with `state_unavailable` were not
acknowledged). It prints, per engine, the seed, the counts, lost acknowledged writes, start-up times (median, p95) and
every violation. A benchmark: it exits 0 whatever it finds.

    python bench/crash.py [--engine sqlite|postgresql|both] [--kills 100] [--pg-restart-at K] [--max-delay 1.5]
                          [--seed N] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.crash_workload import Crashes
from support.postgres_server import Cluster, cluster

LOST = re.compile(r" lost|no longer granted")  # the check's words for an acknowledged write that is gone
OUTAGE_S = 1.0  # how long PostgreSQL stays down in the restart


def restarter(pg: Cluster) -> Callable[[], Awaitable[None]]:
    async def restart() -> None:
        print("  PostgreSQL: stop", file=sys.stderr)
        await anyio.to_thread.run_sync(pg.stop)
        await anyio.sleep(OUTAGE_S)
        await anyio.to_thread.run_sync(pg.start)
        print("  PostgreSQL: started again", file=sys.stderr)

    return restart


@dataclass(frozen=True)
class Options:
    engines: list[str]
    kills: int
    max_delay: float
    seed: int
    restart_at: int | None
    as_json: bool


async def run(engine: str, pg: Cluster | None, options: Options) -> dict[str, Any]:
    kills, seed, restart_at = options.kills, options.seed, options.restart_at
    print(f"{engine}: seed {seed}", file=sys.stderr)
    started = time.perf_counter()
    startups: list[float] = []
    violations: list[str] = []
    lost: set[str] = set()  # each write the checks found missing, once however many checks found it
    with tempfile.TemporaryDirectory(prefix="crash-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        database = None if pg is None else pg.url
        crashes = Crashes(workspace, Path(tmp) / "data", random.Random(seed), database)
        for n in range(1, kills + 1):
            outage = restarter(pg) if pg is not None and n == restart_at else None
            startup, problems = await crashes.round(options.max_delay, outage)
            startups.append(startup)
            violations += [f"after kill {n - 1}: {p}" for p in problems]
            lost |= {p for p in problems if LOST.search(p)}
            print(f"{engine} kill {n}/{kills}: start-up {startup:.2f} s, {len(problems)} violations", file=sys.stderr)
        problems = await crashes.last_check()
        violations += [f"after kill {kills}: {p}" for p in problems]
        lost |= {p for p in problems if LOST.search(p)}
        ledger = crashes.ledger
    ordered = sorted(startups)
    return {
        "engine": engine,
        "seed": seed,
        "rounds": kills,
        "pgRestartInRound": restart_at if pg is not None else None,
        "acknowledged": dict(sorted(ledger.acknowledged.items())),
        "acknowledgedChecked": sum(ledger.acknowledged.values()),
        "refusedUnavailable": crashes.unavailable,
        "lost": len(lost),
        "pendingNotesLeft": ledger.notes_left,
        "startupMedianS": round(statistics.median(ordered), 3),
        "startupP95S": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
        "totalS": round(time.perf_counter() - started, 1),
        "violations": violations,
    }


async def main(options: Options) -> None:
    reports = []
    for engine in options.engines:
        if engine == "sqlite":
            reports.append(await run(engine, None, options))
            continue
        with cluster() as pg:
            reports.append(await run(engine, pg, options))
    if len(reports) == 2:  # SQLite is the baseline: what PostgreSQL's start-up costs against it
        ratio = reports[1]["startupMedianS"] / reports[0]["startupMedianS"]
        reports[1]["startupMedianVsSqlite"] = round(ratio, 2)
    if options.as_json:
        print(json.dumps(reports, indent=2))
        return
    for report in reports:
        for key, value in report.items():
            if key != "violations":
                print(f"{key:>20}: {value}")
        print(f"{'violations':>20}: {len(report['violations'])}")
        for line in report["violations"]:
            print(f"  {line}")
        print()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--max-delay", type=float, default=1.5, help="seconds of work before the kill, at most")
    parser.add_argument(
        "--pg-restart-at", type=int, default=None, metavar="K", help="restart PostgreSQL in the middle of round K"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    if ns.kills < 1:
        parser.error("--kills must be at least 1")
    if ns.pg_restart_at is not None and not 1 <= ns.pg_restart_at <= ns.kills:
        parser.error("--pg-restart-at must name a round, 1 to --kills")
    chosen = ["sqlite", "postgresql"] if ns.engine == "both" else [ns.engine]
    seed = random.randrange(2**32) if ns.seed is None else ns.seed
    anyio.run(main, Options(chosen, ns.kills, ns.max_delay, seed, ns.pg_restart_at, ns.json))
