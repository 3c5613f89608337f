"""The crash suite's long form: kill -9 a real stdio server at random moments of a mixed workload, N times.

Each round starts `managed-tools serve` (resuming one session), checks the data dir against everything the client
saw acknowledged so far (tests/crash_workload.py: integrity_check, memory versions, substrate versions and the
file agreeing with its history, granted approvals, completed shell commands), runs memory writes with CAS,
substrate promotions, shell commands and one `managed-tools approve` until a SIGKILL of the server's process group
after a random delay, and notes whether the kill left a pending substrate write for start-up to settle. It prints
the seed, the counts, start-up times (median, p95) and every violation. A benchmark: it exits 0 whatever it finds.

    python bench/crash.py [--kills 100] [--max-delay 1.5] [--seed N] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from crash_workload import Crashes


async def main(kills: int, max_delay: float, seed: int, as_json: bool) -> None:
    print(f"seed {seed}", file=sys.stderr)
    started = time.perf_counter()
    startups: list[float] = []
    violations: list[str] = []
    with tempfile.TemporaryDirectory(prefix="crash-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        crashes = Crashes(workspace, Path(tmp) / "data", random.Random(seed))
        for n in range(1, kills + 1):
            startup, problems = await crashes.round(max_delay)
            startups.append(startup)
            violations += [f"after kill {n - 1}: {p}" for p in problems]
            print(f"kill {n}/{kills}: start-up {startup:.2f} s, {len(problems)} violations", file=sys.stderr)
        violations += [f"after kill {kills}: {p}" for p in await crashes.last_check()]
        ledger = crashes.ledger
    ordered = sorted(startups)
    report = {
        "seed": seed,
        "kills": kills,
        "acknowledged": dict(sorted(ledger.acknowledged.items())),
        "pendingNotesLeft": ledger.notes_left,
        "startupMedianS": round(statistics.median(ordered), 3),
        "startupP95S": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
        "totalS": round(time.perf_counter() - started, 1),
        "violations": violations,
    }
    if as_json:
        print(json.dumps(report, indent=2))
        return
    for key, value in report.items():
        if key != "violations":
            print(f"{key:>16}: {value}")
    print(f"{'violations':>16}: {len(violations)}")
    for line in violations:
        print(f"  {line}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--max-delay", type=float, default=1.5, help="seconds of work before the kill, at most")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    anyio.run(main, ns.kills, ns.max_delay, random.randrange(2**32) if ns.seed is None else ns.seed, ns.json)
