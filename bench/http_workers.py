"""Streamable HTTP calls/s of the whole server: `serve --workers 1` and `--workers 2` against the bare SDK server.

The bare low-level SDK server (bench/bare_echo_server.py `--http`, one process, as users run it) and managed-tools
with `--workers 1` and `--workers N` (`serve --transport http --workers N`, server/http/workers.py) run side by
side on free loopback ports in the same run; `--clients` concurrent clients, each on its own connection, call as
fast as answers come for `--seconds`, and the servers take turns `--repeat` times, so the machine's load falls on
each alike. The ratios are the median of the runs' ratios; server CPU per call counts every process of a server
(the parent and its workers). The clients share the machine with the servers.

    python bench/http_workers.py [--clients 16] [--seconds 10] [--repeat 3] [--workers 2] [--mode auto|legacy]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path

import anyio
from http_roundtrip import Load, load_series, print_load_rows, server_at
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
                    client_cpu = time.process_time()
                    load = await load_series(target, args.mode, args.clients, args.seconds, 30, pid=pid)
                    clients_cpu.append((time.process_time() - client_cpu) / load.calls * 1000)
                    loads.append(replace(load, repetition=repetition))
    return loads, clients_cpu


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
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0 or args.repeat < 1 or args.workers < 2:
        parser.error("--clients and --repeat at least 1, --seconds positive, --workers at least 2")
    loads, clients_cpu = anyio.run(run_all, args)
    many = f"workers-{args.workers}"
    print(f"\n{args.mode}: {args.clients} clients for {args.seconds:g} s each, {os.cpu_count()} CPUs\n")
    print_load_rows(loads)
    print(f"\nthe clients' CPU per call (this process), per run in the order above: "
          f"{', '.join(f'{ms:.2f}' for ms in clients_cpu)} ms")  # fmt: skip
    print("\ncalls/s ratios, median over the runs (1.0 = as fast as the bare SDK server in one process):")
    for ours, theirs in (("workers-1", "bare"), (many, "bare"), (many, "workers-1")):
        print(f"  {f'{ours} / {theirs}':<24} {ratio(loads, ours, theirs):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
