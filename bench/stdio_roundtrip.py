"""Stdio round-trip latency: managed-tools `session_get_events` against a bare low-level `echo` server.

A third series, `bare-replay`, has the bare server answer with the very bytes and output schema of a real
`session_get_events` result: managed/bare-replay is our own per-call cost with the payload held equal.

Each series starts its server as a subprocess, connects with `mcp.Client(StdioServerParameters(...))`,
lists the tools once and makes `--warmup` untimed calls; then the three series' `--calls` sequential round trips
are timed with `time.perf_counter`, interleaved (managed, bare, bare-replay, managed, ...) so that the machine's
load falls on all three alike. `client CPU ms` is this process's CPU time per call: reading the answer and
checking it against the tool's output schema. The series run in both protocol modes: `auto` (2026-07-28) and
`legacy` (2025-11-25). The figure of merit is managed/bare for p50 and p95 per mode; the target is <= 1.3. It is
a benchmark, not a test: the exit status is 0 whatever the figures are.

    python bench/stdio_roundtrip.py [--calls 300] [--warmup 30] [--mode auto|legacy|both] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import anyio
from mcp import StdioServerParameters
from roundtrip import (
    BARE_SERVER,
    MODES,
    REPO_ROOT,
    TARGET_RATIO,
    Series,
    Target,
    bare_tool,
    capture_replay,
    managed_tool,
    print_table,
    progress,
    ratios,
    run_interleaved,
)


def managed_target(workspace: Path) -> Target:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--data-dir", f"{workspace}.state"],
        cwd=str(REPO_ROOT),
    )
    return Target("managed", *managed_tool(), params)


def bare_target(replay_file: Path | None = None) -> Target:
    env = dict(os.environ)
    if replay_file is not None:
        env["BENCH_REPLAY_FILE"] = str(replay_file)
    params = StdioServerParameters(command=sys.executable, args=[str(BARE_SERVER)], cwd=str(REPO_ROOT), env=env)
    name = "bare" if replay_file is None else "bare-replay"
    return Target(name, *bare_tool(replay_file is not None), params)


async def run_all(modes: tuple[str, ...], calls: int, warmup: int) -> list[Series]:
    results: list[Series] = []
    with tempfile.TemporaryDirectory(prefix="managed-tools-bench-") as tmp:
        for mode in modes:
            # A fresh workspace (and state database) per mode, so each managed series starts from the same state.
            workspace = Path(tmp) / mode
            workspace.mkdir()
            replay = Path(tmp) / f"{mode}-replay.json"
            await capture_replay(managed_target(workspace), replay)
            progress(f"running managed, bare and bare-replay / {mode}, interleaved")
            targets = [managed_target(workspace), bare_target(), bare_target(replay)]
            results += await run_interleaved(targets, mode, calls, warmup)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per series (default: 300)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed calls before timing (default: 30)")
    parser.add_argument("--mode", choices=["auto", "legacy", "both"], default="both", help="protocol mode(s)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    if args.calls < 2 or args.warmup < 0:
        parser.error("--calls must be at least 2 and --warmup at least 0")

    modes = MODES if args.mode == "both" else (args.mode,)
    results = anyio.run(run_all, modes, args.calls, args.warmup)
    summary = ratios(results)
    if args.json:
        document = {
            "calls": args.calls,
            "warmup": args.warmup,
            "target_ratio": TARGET_RATIO,
            "series": [asdict(s) for s in results],
            "ratios": summary,
        }
        print(json.dumps(document, indent=2))
    else:
        print_table(
            f"stdio round trips: {args.calls} timed calls per series after {args.warmup} warm-up calls",
            results,
            summary,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
