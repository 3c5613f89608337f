"""Stdio latency of `read` and `memory_read` against what a user would pick instead, in one run (issue 41 item 2).

Series, all reached by one `mcp.Client` over stdio and timed alike (bench/roundtrip.py `run_interleaved`: one call
to each server in turn, again and again, so the machine's load falls on all of them):

- `managed read`: ours, `read` of a 5 KB workspace file;
- `managed memory_read`: ours, `memory_read` of the session state;
- `mcpserver echo`: the SDK's high-level `MCPServer` with one `echo` tool (bench/mcpserver_echo_server.py);
- `lowlevel echo`: the SDK's low-level `Server`, which ours is built on, answering `echo` (bench/bare_echo_server.py);
- `raw echo`: plain JSON-RPC lines with `json`, no MCP library (bench/raw_echo_server.py): the pipe's floor;
- `npm read_text_file`: the npm filesystem server (@modelcontextprotocol/server-filesystem) reading the same file.

The whole set runs `--repeat` times (fresh servers each time); each figure printed is the median over the
repetitions of that repetition's p50 or p95, and each ratio the median of the per-repetition ratios. The targets
(issue 41): `read` and `memory_read` p50 <= 1.3x the `MCPServer` echo, `read` p50 <= 1.2x npm's `read_text_file`.
The npm package is taken from `--npm-prefix` (default $MANAGED_TOOLS_NPM_PREFIX, as .ci/run installs it) or
installed into a temporary directory with `npm install`; without npm that series is left out. It is a
benchmark, not a test: the exit status is 0 whatever the figures are.

    python bench/stdio_compare.py [--calls 300] [--warmup 30] [--repeat 3] [--mode legacy|auto] [--json]
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
from pathlib import Path
from typing import Any

import anyio
from mcp import StdioServerParameters
from roundtrip import REPO_ROOT, Series, Target, progress, run_interleaved

BENCH = Path(__file__).resolve().parent
FILE_NAME = "bench.txt"
# 5 KB of text lines, as a model reads a source file.
LINE = "line {:03}: a small workspace file, as a model reads one, padded out a bit\n"
BENCH_FILE = "".join(LINE.format(n) for n in range(70))
NPM_PACKAGE = "@modelcontextprotocol/server-filesystem"
ECHO = ("echo", {"text": "hi"})
# (numerator, denominator, target) for every ratio printed.
RATIOS = (
    ("managed read", "mcpserver echo", 1.3),
    ("managed memory_read", "mcpserver echo", 1.3),
    ("managed read", "npm read_text_file", 1.2),
    ("managed read", "raw echo", None),
    ("managed read", "lowlevel echo", None),
    ("mcpserver echo", "raw echo", None),
    ("lowlevel echo", "raw echo", None),
    ("npm read_text_file", "raw echo", None),
)


def _python(script: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(BENCH / script)], cwd=str(REPO_ROOT))


def targets(workspace: Path, npm_entry: Path | None) -> list[Target]:
    managed = StdioServerParameters(
        command=sys.executable,
        args=["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--data-dir", f"{workspace}.state"],
        cwd=str(REPO_ROOT),
    )
    chosen = [
        Target("managed read", "read", {"path": FILE_NAME}, managed),
        Target("managed memory_read", "memory_read", {"target": "session_state"}, managed),
        Target("mcpserver echo", *ECHO, _python("mcpserver_echo_server.py")),
        Target("lowlevel echo", *ECHO, _python("bare_echo_server.py")),
        Target("raw echo", *ECHO, _python("raw_echo_server.py")),
    ]
    if npm_entry is not None:
        node = StdioServerParameters(command="node", args=[str(npm_entry), str(workspace)], cwd=str(workspace))
        chosen.append(Target("npm read_text_file", "read_text_file", {"path": str(workspace / FILE_NAME)}, node))
    return chosen


def npm_server(prefix: str | None, scratch: Path) -> Path | None:
    """The npm filesystem server's entry point: from `prefix` if it is installed there, else installed into
    `scratch` now; None without npm (or with npm but no registry)."""
    for root in [Path(prefix)] if prefix else []:
        entry = root / "node_modules" / NPM_PACKAGE / "dist" / "index.js"
        if entry.is_file():
            return entry
    if shutil.which("npm") is None or shutil.which("node") is None:
        progress("npm or node is missing: the npm series is left out")
        return None
    progress(f"installing {NPM_PACKAGE} into a temporary directory")
    done = subprocess.run(
        ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(scratch), NPM_PACKAGE],
        capture_output=True,
        text=True,
        check=False,
    )
    entry = scratch / "node_modules" / NPM_PACKAGE / "dist" / "index.js"
    if done.returncode != 0 or not entry.is_file():
        progress(f"npm install failed ({done.stderr.strip()[:200]}): the npm series is left out")
        return None
    return entry


async def run_all(calls: int, warmup: int, repeat: int, mode: str, npm_prefix: str | None) -> list[list[Series]]:
    """`repeat` runs of every series interleaved, each with fresh servers (and our state in a fresh directory)."""
    runs: list[list[Series]] = []
    with tempfile.TemporaryDirectory(prefix="managed-tools-compare-") as tmp:
        npm_entry = npm_server(npm_prefix, Path(tmp) / "npm")
        for n in range(repeat):
            workspace = Path(tmp) / f"run{n}"
            workspace.mkdir()
            (workspace / FILE_NAME).write_text(BENCH_FILE)
            progress(f"repetition {n + 1} of {repeat}: every series interleaved")
            runs.append(await run_interleaved(targets(workspace, npm_entry), mode, calls, warmup))
    return runs


def summarise(runs: list[list[Series]]) -> dict[str, Any]:
    """Per series the median over repetitions of its p50 and p95, and per ratio the median of each repetition's."""
    by_run = [{s.server: s for s in run} for run in runs]
    names = list(by_run[0])
    series = {
        name: {
            "p50_ms": round(statistics.median(r[name].p50_ms for r in by_run), 3),
            "p95_ms": round(statistics.median(r[name].p95_ms for r in by_run), 3),
            "client_cpu_ms": round(statistics.median(r[name].client_cpu_ms for r in by_run), 3),
            "p50_per_run": [r[name].p50_ms for r in by_run],
        }
        for name in names
    }
    ratios: dict[str, dict[str, Any]] = {}
    for top, bottom, target in RATIOS:
        if top not in names or bottom not in names:
            continue
        p50 = statistics.median(r[top].p50_ms / r[bottom].p50_ms for r in by_run)
        p95 = statistics.median(r[top].p95_ms / r[bottom].p95_ms for r in by_run)
        met = None if target is None else p50 <= target
        ratios[f"{top} / {bottom}"] = {"p50": round(p50, 2), "p95": round(p95, 2), "target": target, "met": met}
    return {"series": series, "ratios": ratios}


def print_summary(title: str, summary: dict[str, Any]) -> None:
    print(title + "\n")
    print(f"{'series':<22} {'p50 ms':>8} {'p95 ms':>8} {'client CPU ms':>14}   p50 per repetition")
    print("-" * 80)
    for name, s in summary["series"].items():
        runs = " ".join(f"{v:.3f}" for v in s["p50_per_run"])
        print(f"{name:<22} {s['p50_ms']:>8.3f} {s['p95_ms']:>8.3f} {s['client_cpu_ms']:>14.3f}   {runs}")
    print("\nratios (median of the repetitions' ratios):")
    for name, r in summary["ratios"].items():
        verdict = "" if r["target"] is None else f"   target <= {r['target']}: {'met' if r['met'] else 'NOT met'}"
        print(f"  {name:<42} p50 {r['p50']:>5.2f}x   p95 {r['p95']:>5.2f}x{verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per series and repetition (default: 300)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed calls before timing (default: 30)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions, each with fresh servers (default: 3)")
    parser.add_argument("--mode", choices=["legacy", "auto"], default="legacy", help="protocol era (default: legacy)")
    parser.add_argument("--npm-prefix", default=os.environ.get("MANAGED_TOOLS_NPM_PREFIX"), help="where npm put it")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    if args.calls < 2 or args.warmup < 0 or args.repeat < 1:
        parser.error("--calls must be at least 2, --warmup at least 0 and --repeat at least 1")
    runs = anyio.run(run_all, args.calls, args.warmup, args.repeat, args.mode, args.npm_prefix)
    summary = summarise(runs)
    if args.json:
        print(json.dumps({"calls": args.calls, "warmup": args.warmup, "repeat": args.repeat, **summary}, indent=2))
    else:
        title = f"stdio p50/p95 ({args.mode}): {args.calls} timed calls per series, {args.repeat} repetitions"
        print_summary(title, summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
