"""Streamable HTTP calls/s of the whole server: `serve --workers 1` and `--workers 2` against the bare SDK server.

The bare low-level SDK server (bench/bare_echo_server.py `--http`, one process, as users run it) and managed-tools
with `--workers 1` and `--workers N` (`serve --transport http --workers N`, server/http/workers.py) run side by
side on free loopback ports in the same run; `--clients` concurrent clients, each on its own connection, call as
fast as answers come for `--seconds`, and the servers take turns `--repeat` times, so the machine's load falls on
each alike. The ratios are the median of the runs' ratios; server CPU per call counts every process of a server
(the parent and its workers). The clients share the machine with the servers.

    python bench/http_workers.py [--clients 16] [--seconds 10] [--repeat 3] [--workers 2] [--mode auto|legacy]
                                 [--client-processes 1]

With `--client-processes P` the clients run in P processes of this script, which connect and warm up, then start
calling together: one client process can be what saturates first (its CPU per call is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import asdict, replace
from pathlib import Path

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from http_roundtrip import Load, cpu_seconds, load_series, print_load_rows, server_at
from roundtrip import BARE_SERVER, Target, bare_tool, managed_tool, progress


def managed_argv(root: Path, name: str, workers: int) -> list[str]:
    workspace = root / name
    workspace.mkdir()
    argv = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
    argv += ["--data-dir", f"{workspace}.state", "--transport", "http", "--port", "0", "--no-token"]
    return [*argv, "--workers", str(workers)]


async def run_all(args: argparse.Namespace) -> tuple[list[Load], list[float]]:
    """Each run's figures, and the clients' own CPU per call in it (this process: its connecting, warm-up and
    teardown included), which on a small machine is a share of the cores the servers do not get."""
    loads: list[Load] = []
    clients_cpu: list[float] = []
    with tempfile.TemporaryDirectory(prefix="managed-tools-workers-bench-") as tmp:
        root = Path(tmp)
        servers = {
            "bare": ([sys.executable, str(BARE_SERVER), "--http"], bare_tool(False)),
            "workers-1": (managed_argv(root, "one", 1), managed_tool()),
            f"workers-{args.workers}": (managed_argv(root, "many", args.workers), managed_tool()),
        }
        async with AsyncExitStack() as stack:
            targets: list[tuple[Target, int]] = []
            for name, (argv, (tool, arguments)) in servers.items():
                url, pid = await stack.enter_async_context(server_at(argv, root / f"{name}.log"))
                targets.append((Target(name, tool, arguments, url), pid))
            for repetition in range(1, args.repeat + 1):
                for target, pid in targets:
                    progress(f"{repetition}/{args.repeat}: {target.server}, {args.clients} clients")
                    if args.client_processes == 1:
                        client_cpu = time.process_time()
                        load = await load_series(target, args.mode, args.clients, args.seconds, 30, pid=pid)
                        clients_cpu.append((time.process_time() - client_cpu) / load.calls * 1000)
                    else:
                        load, cpu = await driven(target, pid, args)
                        clients_cpu.append(cpu)
                    loads.append(replace(load, repetition=repetition))
    return loads, clients_cpu


async def driven(target: Target, pid: int, args: argparse.Namespace) -> tuple[Load, float]:
    """One run with the clients spread over `--client-processes` processes of this script (`--drive`), which
    connect and warm up, then start calling together; the clients' CPU per call is theirs, all processes."""
    share = [args.clients // args.client_processes + (i < args.clients % args.client_processes)
             for i in range(args.client_processes)]  # fmt: skip
    argv = [sys.executable, __file__, "--drive", str(target.connect), target.tool, json.dumps(target.arguments)]
    async with AsyncExitStack() as stack:
        drivers = [
            await stack.enter_async_context(await anyio.open_process(
                [*argv, "--clients", str(n), "--seconds", str(args.seconds), "--mode", args.mode, "--pid", str(pid)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            ))
            for n in share if n
        ]  # fmt: skip
        outputs = [BufferedByteReceiveStream(d.stdout) for d in drivers if d.stdout is not None]
        for output in outputs:
            assert await output.receive_until(b"\n", 64) == b"ready"
        before, started = cpu_seconds(pid), time.perf_counter()
        for driver in drivers:
            assert driver.stdin is not None
            await driver.stdin.send(b"go\n")
        runs = [Load(**json.loads(await output.receive_until(b"\n", 1 << 20))) for output in outputs]
        elapsed, after = time.perf_counter() - started, cpu_seconds(pid)
        for driver in drivers:
            await driver.wait()
    calls = sum(run.calls for run in runs)
    server_cpu = None if before is None or after is None else round((after - before) / calls * 1000, 3)
    clients_cpu = sum(run.server_cpu_ms or 0.0 for run in runs) / calls  # each driver reports its own CPU, in ms
    load = Load(
        server=target.server, mode=args.mode, clients=args.clients, calls=calls, seconds=round(elapsed, 2),
        calls_per_second=round(calls / elapsed, 1), p50_ms=statistics.median(run.p50_ms for run in runs),
        p95_ms=max(run.p95_ms for run in runs), server_cpu_ms=server_cpu,
    )  # fmt: skip
    return load, clients_cpu


async def drive(args: argparse.Namespace) -> None:
    """`--drive URL TOOL ARGUMENTS`: one driver process; its Load's server CPU field carries its own CPU in ms."""
    url, tool, arguments = args.drive
    target = Target("driver", tool, json.loads(arguments), url)

    async def warmed() -> None:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)

    started = time.process_time()
    load = await load_series(target, args.mode, args.clients, args.seconds, 30, pid=args.pid, warmed=warmed)
    own = (time.process_time() - started) * 1000
    print(json.dumps(asdict(replace(load, server_cpu_ms=own))), flush=True)


def ratio(loads: list[Load], ours: str, theirs: str) -> float:
    by_run = {(load.server, load.repetition): load.calls_per_second for load in loads}
    runs = sorted({load.repetition for load in loads})
    return statistics.median(by_run[ours, run] / by_run[theirs, run] for run in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default: 16)")
    parser.add_argument("--seconds", type=float, default=10.0, help="each run's length (default: 10)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each server, in turns (default: 3)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="the many (default: CPUs)")
    parser.add_argument("--mode", choices=["auto", "legacy"], default="auto", help="protocol era (default: auto)")
    parser.add_argument("--client-processes", type=int, default=1, help="processes the clients run in (default: 1)")
    parser.add_argument("--drive", nargs=3, metavar=("URL", "TOOL", "ARGUMENTS"), help=argparse.SUPPRESS)
    parser.add_argument("--pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        anyio.run(drive, args)
        return 0
    if args.clients < 1 or args.seconds <= 0 or args.repeat < 1 or args.workers < 2 or args.client_processes < 1:
        parser.error("--clients, --repeat and --client-processes at least 1, --seconds positive, --workers at least 2")
    loads, clients_cpu = anyio.run(run_all, args)
    many = f"workers-{args.workers}"
    print(f"\n{args.mode}: {args.clients} clients for {args.seconds:g} s each, {os.cpu_count()} CPUs\n")
    print_load_rows(loads)
    print(f"\nthe clients' CPU per call (all their processes), per run in the order above: "
          f"{', '.join(f'{ms:.2f}' for ms in clients_cpu)} ms")  # fmt: skip
    print("\ncalls/s ratios, median over the runs (1.0 = as fast as the bare SDK server in one process):")
    for ours, theirs in (("workers-1", "bare"), (many, "bare"), (many, "workers-1")):
        print(f"  {f'{ours} / {theirs}':<24} {ratio(loads, ours, theirs):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
