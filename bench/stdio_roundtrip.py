"""Stdio round-trip latency: managed-tools tools against a bare low-level `echo` server.

The tools are issue 24's (`environment_describe`, `memory_read`, `read` of a small workspace file) and
`session_get_events`, each measured on its own. For each, a third series, `bare-replay`, has the bare server answer
with the very bytes and output schema of a real result of that tool: managed/bare-replay is our own per-call cost
with the payload (and so the client's checking of it against the output schema) held equal.

Each series starts its server as a subprocess, connects with `mcp.Client(StdioServerParameters(...))`,
lists the tools once and makes `--warmup` untimed calls; then the three series' `--calls` sequential round trips
are timed with `time.perf_counter`, interleaved (managed, bare, bare-replay, managed, ...) so that the machine's
load falls on all three alike. `client CPU ms` is this process's CPU time per call: reading the answer and
checking it against the tool's output schema. The series run in both protocol modes: `auto` (2026-07-28) and
`legacy` (2025-11-25). The figure of merit is managed/bare for p50 and p95 per mode; the target is <= 1.3. It is
a benchmark, not a test: the exit status is 0 whatever the figures are.

    python bench/stdio_roundtrip.py [--calls 300] [--warmup 30] [--mode auto|legacy|both] [--tools A,B] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

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
    print_table,
    progress,
    ratios,
    run_interleaved,
)

# The tools measured, each with its arguments: issue 24's three and the one this bench measured first.
TOOLS: dict[str, dict[str, Any]] = {
    "session_get_events": {"limit": 5},
    "environment_describe": {},
    "memory_read": {"target": "session_state"},
    "read": {"path": "bench.txt"},
}
BENCH_FILE = "".join(f"line {n}: a small workspace file, as a model reads one\n" for n in range(1, 41))


def managed_target(workspace: Path, tool: str) -> Target:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--data-dir", f"{workspace}.state"],
        cwd=str(REPO_ROOT),
    )
    return Target("managed", tool, TOOLS[tool], params)


def bare_target(replay_file: Path | None = None) -> Target:
    env = dict(os.environ)
    if replay_file is not None:
        env["BENCH_REPLAY_FILE"] = str(replay_file)
    params = StdioServerParameters(command=sys.executable, args=[str(BARE_SERVER)], cwd=str(REPO_ROOT), env=env)
    name = "bare" if replay_file is None else "bare-replay"
    return Target(name, *bare_tool(replay_file is not None), params)


async def run_all(modes: tuple[str, ...], tools: list[str], calls: int, warmup: int) -> list[Series]:
    """Per mode a fresh workspace (and state database), then per tool its three series, interleaved. A series'
    `tool` is the managed tool it belongs to (the bare servers' own tool is `echo` or `replay`)."""
    results: list[Series] = []
    with tempfile.TemporaryDirectory(prefix="managed-tools-bench-") as tmp:
        for mode in modes:
            workspace = Path(tmp) / mode
            workspace.mkdir()
            (workspace / "bench.txt").write_text(BENCH_FILE)
            for tool in tools:
                replay = Path(tmp) / f"{mode}-{tool}-replay.json"
                await capture_replay(managed_target(workspace, tool), replay)
                progress(f"running managed, bare and bare-replay / {mode} / {tool}, interleaved")
                targets = [managed_target(workspace, tool), bare_target(), bare_target(replay)]
                results += [replace(s, tool=tool) for s in await run_interleaved(targets, mode, calls, warmup)]
    return results


def ratios_by_tool(results: list[Series], tools: list[str]) -> dict[str, dict[str, Any]]:
    """Each tool's managed/bare and managed/bare-replay ratios, per mode."""
    return {
        f"{tool} {key}": value
        for tool in tools
        for key, value in ratios([s for s in results if s.tool == tool]).items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per series (default: 300)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed calls before timing (default: 30)")
    parser.add_argument("--mode", choices=["auto", "legacy", "both"], default="both", help="protocol mode(s)")
    parser.add_argument(
        "--tools", default=",".join(TOOLS), help=f"comma-separated managed tools (default: {','.join(TOOLS)})"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    if args.calls < 2 or args.warmup < 0:
        parser.error("--calls must be at least 2 and --warmup at least 0")
    tools = [name.strip() for name in args.tools.split(",") if name.strip()]
    unknown = [name for name in tools if name not in TOOLS]
    if unknown or not tools:
        parser.error(f"--tools takes some of {', '.join(TOOLS)}; unknown: {', '.join(unknown) or '(none given)'}")

    modes = MODES if args.mode == "both" else (args.mode,)
    results = anyio.run(run_all, modes, tools, args.calls, args.warmup)
    summary = ratios_by_tool(results, tools)
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
