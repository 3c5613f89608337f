"""Streamable HTTP: tool-call round trips and throughput, managed-tools against a bare SDK HTTP server.

Every server runs as a subprocess on a free loopback port in the same run and is reached with
`mcp.Client(url)`: managed-tools (`serve --transport http`, a fresh workspace per mode), the bare
low-level SDK server of bench/bare_echo_server.py (`--http`: `Server.streamable_http_app()` on uvicorn),
and the bare server replaying a real `session_get_events` result (same payload and output schema).

The three servers of a mode run side by side, so that the machine's load falls on each alike:

- Round trip: `--calls` sequential timed calls after `--warmup`, interleaved call by call across the three
  servers; p50/p95/mean and the client's CPU time per call, per server and mode.
- Throughput: `--clients` concurrent clients, each its own connection (a stateful MCP session in legacy
  mode, standalone requests in auto mode), call as fast as answers come for `--seconds`; calls/s,
  p50/p95 under that load, and the server process's CPU time per call (all its threads, from /proc; on a
  shared machine the steadiest of the three). The servers take turns `--repeat` times; managed/bare is
  the median of the runs' ratios.

Both servers run uvicorn with the same settings (server/http/transport.py `http_server`, bench/bare_echo_server.py
`main_http`): the httptools parser, no WebSocket support, no access log, the asyncio loop, a loopback
socket bound before serving.

Modes: `auto` (2026-07-28, no MCP session) and `legacy` (2025-11-25). The clients share the machine with
the server. A benchmark, not a test: the exit status is 0 whatever the figures are.

    python bench/http_roundtrip.py [--calls 300] [--warmup 30] [--clients 16] [--seconds 5] [--repeat 3]
                                   [--mode auto|legacy|both] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from roundtrip import (
    BARE_SERVER,
    MODES,
    REPO_ROOT,
    Series,
    Target,
    bare_tool,
    capture_replay,
    checked_call,
    managed_tool,
    percentile_95,
    print_table,
    progress,
    ratios,
    run_interleaved,
)

URL = re.compile(r"http://127\.0\.0\.1:\d+/mcp")


@dataclass(frozen=True)
class Load:
    server: str
    mode: str
    clients: int
    calls: int
    seconds: float
    calls_per_second: float
    p50_ms: float
    p95_ms: float
    server_cpu_ms: float | None  # the server process's CPU time per call; None where /proc is not there
    repetition: int = 1


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of a process and its live descendants (a server's workers), all their threads
    (Linux /proc); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
                    for child in (task / "children").read_text().split()]  # fmt: skip
    except OSError:
        return None
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(child) or 0.0 for child in children)


@asynccontextmanager
async def server_at(argv: list[str], log: Path, env: dict[str, str] | None = None) -> AsyncIterator[tuple[str, int]]:
    """Start a server subprocess; yield the Streamable HTTP URL it prints on stderr and its pid; stop it
    afterwards."""
    with log.open("wb") as stderr:
        process = await anyio.open_process(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, cwd=REPO_ROOT, env=env
        )
    try:
        with anyio.fail_after(60):
            while not (found := URL.search(text := await anyio.Path(log).read_text(errors="replace"))):
                if process.returncode is not None:
                    raise RuntimeError(f"{argv} exited: {text}")
                await anyio.sleep(0.05)
        yield found.group(0), process.pid
    finally:
        process.terminate()
        with anyio.CancelScope(shield=True):
            await process.wait()


async def load_series(
    target: Target,
    mode: str,
    clients: int,
    seconds: float,
    warmup: int,
    *,
    pid: int,
    warmed: Callable[[], Awaitable[None]] | None = None,
) -> Load:
    """`clients` connected and warmed up, then (once `warmed` returns, when given) calling for `seconds`."""
    samples: list[float] = []
    async with AsyncExitStack() as stack:
        connected = [await stack.enter_async_context(Client(target.connect, mode=mode)) for _ in range(clients)]
        for client in connected:
            for _ in range(max(1, warmup // clients)):
                await checked_call(client, target)
        if warmed is not None:
            await warmed()
        deadline = time.perf_counter() + seconds

        async def worker(client: Client) -> None:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                await client.call_tool(target.tool, target.arguments)
                samples.append((time.perf_counter() - t0) * 1000)

        started, cpu_before = time.perf_counter(), cpu_seconds(pid)
        async with anyio.create_task_group() as tg:
            for client in connected:
                tg.start_soon(worker, client)
        elapsed, cpu_after = time.perf_counter() - started, cpu_seconds(pid)
    server_cpu = None if cpu_before is None or cpu_after is None else (cpu_after - cpu_before) / len(samples) * 1000
    return Load(
        server=target.server,
        mode=mode,
        clients=clients,
        calls=len(samples),
        seconds=round(elapsed, 2),
        calls_per_second=round(len(samples) / elapsed, 1),
        p50_ms=round(statistics.median(samples), 3),
        p95_ms=round(percentile_95(samples), 3),
        server_cpu_ms=None if server_cpu is None else round(server_cpu, 3),
    )


@dataclass(frozen=True)
class Options:
    calls: int
    warmup: int
    clients: int
    seconds: float
    repeat: int


async def run_all(modes: tuple[str, ...], options: Options) -> tuple[list[Series], list[Load]]:
    """Per mode, the three servers run side by side: their round trips are timed interleaved call by call, and
    their throughput runs take turns (managed, bare, bare-replay, managed, ...) `--repeat` times, so that the
    machine's load falls on each alike."""
    series: list[Series] = []
    loads: list[Load] = []
    bare_argv = [sys.executable, str(BARE_SERVER), "--http"]
    with tempfile.TemporaryDirectory(prefix="managed-tools-http-bench-") as tmp:
        for mode in modes:
            workspace = Path(tmp) / mode
            workspace.mkdir()
            managed_argv = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
            managed_argv += ["--data-dir", f"{workspace}.state"]  # in the temporary dir, not the user's state dir
            # No token, as the bare server has none: the ratio measures the same protocol work on both sides.
            managed_argv += ["--transport", "http", "--port", "0", "--no-token"]
            replay = Path(tmp) / f"{mode}-replay.json"
            env = {**os.environ, "BENCH_REPLAY_FILE": str(replay)}
            async with AsyncExitStack() as servers:
                pids: dict[str, int] = {}
                url, pids["managed"] = await servers.enter_async_context(
                    server_at(managed_argv, Path(tmp) / f"{mode}-managed.log")
                )
                targets = [Target("managed", *managed_tool(), url)]
                await capture_replay(targets[0], replay)
                url, pids["bare"] = await servers.enter_async_context(
                    server_at(bare_argv, Path(tmp) / f"{mode}-bare.log")
                )
                targets.append(Target("bare", *bare_tool(False), url))
                url, pids["bare-replay"] = await servers.enter_async_context(
                    server_at(bare_argv, Path(tmp) / f"{mode}-replay.log", env)
                )
                targets.append(Target("bare-replay", *bare_tool(True), url))
                progress(f"{mode}: round trips, interleaved")
                series += await run_interleaved(targets, mode, options.calls, options.warmup)
                for repetition in range(1, options.repeat + 1):
                    for target in targets:
                        progress(f"{mode} {repetition}/{options.repeat}: {target.server}, {options.clients} clients")
                        load = await load_series(
                            target, mode, options.clients, options.seconds, options.warmup, pid=pids[target.server]
                        )
                        loads.append(replace(load, repetition=repetition))
    return series, loads


def throughput_ratios(loads: list[Load], figure: Callable[[Load], float | None]) -> dict[str, float]:
    """managed/baseline `figure` in each repetition (the two ran one after the other), then the median of those."""
    by_key = {(load.server, load.mode, load.repetition): load for load in loads}
    out: dict[str, float] = {}
    for mode in MODES:
        for baseline in ("bare", "bare-replay"):
            per_run = [
                ours / theirs
                for (server, in_mode, repetition), managed in by_key.items()
                if server == "managed" and in_mode == mode
                for bare in [by_key.get((baseline, mode, repetition))]
                if bare is not None
                for ours, theirs in [(figure(managed), figure(bare))]
                if ours is not None and theirs
            ]
            if per_run:
                out[f"{mode} vs {baseline}"] = round(statistics.median(per_run), 2)
    return out


def calls_per_second(load: Load) -> float:
    return load.calls_per_second


def server_cpu_per_call(load: Load) -> float | None:
    return load.server_cpu_ms


def print_loads(loads: list[Load], summary: dict[str, float], cpu: dict[str, float], options: Options) -> None:
    print(f"\nthroughput: {options.clients} concurrent clients for {options.seconds:g} s each\n")
    print_load_rows(loads)
    print("\nmanaged/bare throughput, median over the runs (1.0 = as fast as the bare SDK server):")
    for key, ratio in summary.items():
        print(f"  {key:<22} {ratio:.2f}x")
    if cpu:
        print("\nmanaged/bare server CPU per call under that load, median over the runs (1.0 = as cheap as bare):")
        for key, ratio in cpu.items():
            print(f"  {key:<22} {ratio:.2f}x")


def print_load_rows(loads: list[Load]) -> None:
    header = (
        f"{'server':<11} {'mode':<7} {'run':>3} {'calls':>7} {'calls/s':>9} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'server CPU ms/call':>18}"
    )
    print(header)
    print("-" * len(header))
    for load in loads:
        server_cpu = "" if load.server_cpu_ms is None else f"{load.server_cpu_ms:.3f}"
        print(
            f"{load.server:<11} {load.mode:<7} {load.repetition:>3} {load.calls:>7} {load.calls_per_second:>9.1f} "
            f"{load.p50_ms:>8.3f} {load.p95_ms:>8.3f} {server_cpu:>18}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="timed sequential calls per series (default: 300)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed calls before timing (default: 30)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients for throughput (default: 16)")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each throughput run lasts (default: 5)")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs of each server, in turns (default: 3)")
    parser.add_argument("--mode", choices=["auto", "legacy", "both"], default="both", help="protocol mode(s)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    if args.calls < 2 or args.warmup < 0 or args.clients < 1 or args.seconds <= 0 or args.repeat < 1:
        parser.error(
            "--calls must be at least 2, --warmup at least 0, --clients and --repeat at least 1, --seconds positive"
        )

    options = Options(args.calls, args.warmup, args.clients, args.seconds, args.repeat)
    modes = MODES if args.mode == "both" else (args.mode,)
    series, loads = anyio.run(run_all, modes, options)
    summary = ratios(series)
    load_summary = throughput_ratios(loads, calls_per_second)
    cpu_summary = throughput_ratios(loads, server_cpu_per_call)
    if args.json:
        document: dict[str, Any] = {
            "options": asdict(options),
            "series": [asdict(s) for s in series],
            "ratios": summary,
            "throughput": [asdict(load) for load in loads],
            "throughput_ratios": load_summary,
            "server_cpu_ratios": cpu_summary,
        }
        print(json.dumps(document, indent=2))
    else:
        title = f"Streamable HTTP round trips: {args.calls} timed calls per series after {args.warmup} warm-up calls"
        print_table(title, series, summary)
        print_loads(loads, load_summary, cpu_summary, options)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
