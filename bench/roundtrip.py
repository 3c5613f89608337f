"""What the round-trip benchmarks share: a target server, timed sequential calls, percentiles and ratios.

A target is anything `mcp.Client` connects to: stdio server parameters, or a Streamable HTTP URL.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

REPO_ROOT = Path(__file__).resolve().parent.parent
BARE_SERVER = Path(__file__).resolve().parent / "bare_echo_server.py"
TARGET_RATIO = 1.3
MODES = ("auto", "legacy")
BASELINES = ("bare", "bare-replay")


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
    # CPU time of this (client) process per timed call: reading the answer, pydantic, and checking the result
    # against the tool's output schema (mcp.Client does, with a validator compiled once per tool).
    client_cpu_ms: float


@dataclass(frozen=True)
class Target:
    server: str
    tool: str
    arguments: dict[str, Any]
    connect: StdioServerParameters | str


def managed_tool() -> tuple[str, dict[str, Any]]:
    return "session_get_events", {"limit": 5}


def bare_tool(replay: bool) -> tuple[str, dict[str, Any]]:
    return ("replay", {}) if replay else ("echo", {"text": "hi"})


async def capture_replay(target: Target, path: Path) -> None:
    """Save one real managed result and its output schema for the bare server to replay."""
    async with Client(target.connect) as client:
        listing = await client.list_tools()
        schema = next(t.output_schema for t in listing.tools if t.name == target.tool)
        for _ in range(3):  # a few calls so the log holds as many events as the timed calls will see
            result = await client.call_tool(target.tool, target.arguments)
    text = getattr(result.content[0], "text", "")
    document = {"outputSchema": schema, "structured": result.structured_content, "text": text}
    await anyio.Path(path).write_text(json.dumps(document))


def percentile_95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[94]


async def checked_call(client: Client, target: Target) -> None:
    result = await client.call_tool(target.tool, target.arguments)
    if result.is_error:
        text = " ".join(getattr(block, "text", "") for block in result.content)
        raise RuntimeError(f"{target.server}: {target.tool} returned an error: {text}")


async def run_series(target: Target, mode: str, calls: int, warmup: int) -> Series:
    return (await run_interleaved([target], mode, calls, warmup))[0]


async def run_interleaved(targets: list[Target], mode: str, calls: int, warmup: int) -> list[Series]:
    """Connect to every target, then time their calls in turn (one call to each, again and again): on a shared
    machine a burst of someone else's load falls on every series alike, not on whichever ran at that moment."""
    samples: dict[str, list[float]] = {target.server: [] for target in targets}
    cpu: dict[str, float] = dict.fromkeys(samples, 0.0)
    async with AsyncExitStack() as stack:
        clients: list[tuple[Target, Client, float]] = []
        for target in targets:
            started = time.perf_counter()
            client = await stack.enter_async_context(Client(target.connect, mode=mode))
            await client.list_tools()
            clients.append((target, client, (time.perf_counter() - started) * 1000))
        for target, client, _ in clients:
            for _ in range(warmup):
                await checked_call(client, target)
        for _ in range(calls):
            for target, client, _ in clients:
                c0, t0 = time.process_time(), time.perf_counter()
                await client.call_tool(target.tool, target.arguments)
                samples[target.server].append((time.perf_counter() - t0) * 1000)
                cpu[target.server] += time.process_time() - c0
        return [
            _series(target, mode, client.protocol_version, connect_ms, samples=samples[name], cpu=cpu[name])
            for target, client, connect_ms in clients
            for name in [target.server]
        ]


def _series(target: Target, mode: str, version: str, connect_ms: float, *, samples: list[float], cpu: float) -> Series:
    return Series(
        server=target.server,
        mode=mode,
        protocol_version=version,
        tool=target.tool,
        calls=len(samples),
        connect_ms=round(connect_ms, 1),
        p50_ms=round(statistics.median(samples), 3),
        p95_ms=round(percentile_95(samples), 3),
        mean_ms=round(statistics.fmean(samples), 3),
        min_ms=round(min(samples), 3),
        max_ms=round(max(samples), 3),
        client_cpu_ms=round(cpu / len(samples) * 1000, 3),
    )


def ratios(results: list[Series]) -> dict[str, dict[str, Any]]:
    by_key = {(s.server, s.mode): s for s in results}
    out: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        managed = by_key.get(("managed", mode))
        for baseline in BASELINES:
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


def print_table(title: str, results: list[Series], summary: dict[str, dict[str, Any]]) -> None:
    print(title + "\n")
    header = f"{'server':<11} {'mode':<7} {'protocol':<11} {'tool':<19} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8}"
    print(header + f" {'connect ms':>11} {'client CPU ms':>14}")
    print("-" * (len(header) + 27))
    for s in results:
        print(
            f"{s.server:<11} {s.mode:<7} {s.protocol_version:<11} {s.tool:<19} "
            f"{s.p50_ms:>8.3f} {s.p95_ms:>8.3f} {s.mean_ms:>8.3f} {s.connect_ms:>11.1f} {s.client_cpu_ms:>14.3f}"
        )
    print(f"\nmanaged/bare ratio (target <= {TARGET_RATIO}):")
    for mode, r in summary.items():
        verdict = "met" if r["met"] else "NOT met"
        print(f"  {mode:<22} p50 {r['p50']:.2f}x   p95 {r['p95']:.2f}x   -> target {verdict}")


def progress(message: str) -> None:
    print(f"  {message} ...", file=sys.stderr, flush=True)
