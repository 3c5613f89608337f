"""Stdio round-trip latency: managed-tools `session_get_events` against a bare low-level `echo` server.

A third series, `bare-replay`, has the bare server answer with the very bytes and output schema of a real
`session_get_events` result: managed/bare-replay is our own per-call cost with the payload held equal.

Each series starts its server as a subprocess, connects with `mcp.Client(StdioServerParameters(...))`,
lists the tools once, makes `--warmup` untimed calls and then times `--calls` sequential round trips with
`time.perf_counter`. The series run in both protocol modes: `auto` (2026-07-28) and `legacy` (2025-11-25).
The figure of merit is managed/bare for p50 and p95 per mode; the target is <= 1.3. It is a benchmark, not
a test: the exit status is 0 whatever the figures are.

    python bench/stdio_roundtrip.py [--calls 300] [--warmup 30] [--mode auto|legacy|both] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

REPO_ROOT = Path(__file__).resolve().parent.parent
BARE_SERVER = Path(__file__).resolve().parent / "bare_echo_server.py"
TARGET_RATIO = 1.3
MODES = ("auto", "legacy")


@dataclass(frozen=True)
class Series:
    server: str
    mode: str
    protocol_version: str
    tool: str
    calls: int
    connect_ms: float
    p50_ms: float
    p95_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float


@dataclass(frozen=True)
class Target:
    server: str
    tool: str
    arguments: dict[str, Any]
    params: StdioServerParameters


def managed_target(workspace: Path) -> Target:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "server", "serve", "--workspace", str(workspace)],
        cwd=str(REPO_ROOT),
    )
    return Target("managed", "session_get_events", {"limit": 5}, params)


def bare_target(replay_file: Path | None = None) -> Target:
    env = dict(os.environ)
    if replay_file is not None:
        env["BENCH_REPLAY_FILE"] = str(replay_file)
    params = StdioServerParameters(command=sys.executable, args=[str(BARE_SERVER)], cwd=str(REPO_ROOT), env=env)
    if replay_file is None:
        return Target("bare", "echo", {"text": "hi"}, params)
    return Target("bare-replay", "replay", {}, params)


async def capture_replay(target: Target, path: Path) -> None:
    """Save one real managed result and its output schema for the bare server to replay."""
    async with Client(target.params) as client:
        listing = await client.list_tools()
        schema = next(t.output_schema for t in listing.tools if t.name == target.tool)
        for _ in range(3):  # a few calls so the log holds as many events as the timed calls will see
            result = await client.call_tool(target.tool, target.arguments)
    text = getattr(result.content[0], "text", "")
    document = {"outputSchema": schema, "structured": result.structured_content, "text": text}
    await anyio.Path(path).write_text(json.dumps(document))


def percentile_95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[94]


async def run_series(target: Target, mode: str, calls: int, warmup: int) -> Series:
    started = time.perf_counter()
    async with Client(target.params, mode=mode) as client:
        await client.list_tools()
        connect_ms = (time.perf_counter() - started) * 1000
        for _ in range(warmup):
            result = await client.call_tool(target.tool, target.arguments)
            if result.is_error:
                text = " ".join(getattr(block, "text", "") for block in result.content)
                raise RuntimeError(f"{target.server}: {target.tool} returned an error: {text}")
        samples: list[float] = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await client.call_tool(target.tool, target.arguments)
            samples.append((time.perf_counter() - t0) * 1000)
        version = client.protocol_version
    return Series(
        server=target.server,
        mode=mode,
        protocol_version=version,
        tool=target.tool,
        calls=calls,
        connect_ms=round(connect_ms, 1),
        p50_ms=round(statistics.median(samples), 3),
        p95_ms=round(percentile_95(samples), 3),
        mean_ms=round(statistics.fmean(samples), 3),
        min_ms=round(min(samples), 3),
        max_ms=round(max(samples), 3),
    )


async def run_all(modes: tuple[str, ...], calls: int, warmup: int) -> list[Series]:
    results: list[Series] = []
    with tempfile.TemporaryDirectory(prefix="managed-tools-bench-") as tmp:
        for mode in modes:
            # A fresh workspace (and state database) per mode, so each managed series starts from the same state.
            workspace = Path(tmp) / mode
            workspace.mkdir()
            replay = Path(tmp) / f"{mode}-replay.json"
            await capture_replay(managed_target(workspace), replay)
            for target in (managed_target(workspace), bare_target(), bare_target(replay)):
                print(f"  running {target.server} / {mode} ...", file=sys.stderr, flush=True)
                results.append(await run_series(target, mode, calls, warmup))
    return results


def ratios(results: list[Series]) -> dict[str, dict[str, Any]]:
    by_key = {(s.server, s.mode): s for s in results}
    out: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        managed = by_key.get(("managed", mode))
        for baseline in ("bare", "bare-replay"):
            bare = by_key.get((baseline, mode))
            if managed is None or bare is None:
                continue
            p50 = managed.p50_ms / bare.p50_ms
            p95 = managed.p95_ms / bare.p95_ms
            out[f"{mode} vs {baseline}"] = {
                "p50": round(p50, 2),
                "p95": round(p95, 2),
                "target": TARGET_RATIO,
                "met": p50 <= TARGET_RATIO and p95 <= TARGET_RATIO,
            }
    return out


def print_table(results: list[Series], summary: dict[str, dict[str, Any]], calls: int, warmup: int) -> None:
    print(f"stdio round trips: {calls} timed calls per series after {warmup} warm-up calls\n")
    header = f"{'server':<11} {'mode':<7} {'protocol':<11} {'tool':<19} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8}"
    print(header + f" {'connect ms':>11}")
    print("-" * (len(header) + 12))
    for s in results:
        print(
            f"{s.server:<11} {s.mode:<7} {s.protocol_version:<11} {s.tool:<19} "
            f"{s.p50_ms:>8.3f} {s.p95_ms:>8.3f} {s.mean_ms:>8.3f} {s.connect_ms:>11.1f}"
        )
    print(f"\nmanaged/bare ratio (target <= {TARGET_RATIO}):")
    for mode, r in summary.items():
        verdict = "met" if r["met"] else "NOT met"
        print(f"  {mode:<22} p50 {r['p50']:.2f}x   p95 {r['p95']:.2f}x   -> target {verdict}")


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
        print_table(results, summary, args.calls, args.warmup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
