"""What one tool call costs in database round trips and time, in process, against the bare SDK server.

Every series runs through `mcp.Client` over the in-memory transport, so no process or pipe adds noise: the
`bare` baseline is bench/bare_echo_server.py's low-level `Server` answering `echo`; the managed series are a
read (`memory_read`, `session_get_events`), a refusal (an unknown tool) and a write (`memory_write`) on a fresh
state file. Rounds interleave the series. A round trip is one step handed to the database thread
(`SqliteDatabase._on_thread`, aiosqlite's thread since issue 38) or, on a tree from before issue 24, one `aiosqlite`
request.
With `--clients N` (default 16) the read and the write also run from N in-process clients at once (each its own
session), against N clients of the bare server: calls/s and CPU time per call, where records share commits.

Run it on another checkout's code (the before figures) with PYTHONPATH=<that checkout>. It is a benchmark, not a
test: it prints median and p95 per series, the ratio to bare, and the process's CPU time per call (all threads,
the in-process client's included: steadier than wall time on a loaded machine), and exits 0 whatever they are.

    python bench/call_round_trips.py [--calls 300] [--rounds 3] [--clients 16] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anyio.lowlevel
import bare_echo_server

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime

CONCURRENT = ("bare echo", "memory_read", "memory_write")
SERIES: dict[str, tuple[str, dict[str, Any]]] = {
    "bare echo": ("echo", {"text": "hi"}),
    "memory_read": ("memory_read", {"target": "session_state"}),
    "session_get_events": ("session_get_events", {"limit": 5}),
    "refusal": ("no_such_tool", {}),
    "memory_write": ("memory_write", {"target": "session_state", "content": "a line of notes"}),
}


class Hops:
    """Counts the steps handed to the database thread, whichever engine the imported tree has."""

    def __init__(self) -> None:
        self.count = 0
        from managed_tools.stores.db import sqlite

        if hasattr(sqlite.SqliteDatabase, "_on_thread"):  # every step to the database thread goes through it
            self._wrap(sqlite.SqliteDatabase, "_on_thread")
        else:  # a tree from before issue 24 ran every statement through aiosqlite's queue
            self._wrap(importlib.import_module("aiosqlite.core").Connection, "_execute")

    def _wrap(self, owner: type, name: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)
        hops = self

        async def counted(*args: Any, **kwargs: Any) -> Any:
            hops.count += 1
            return await original(*args, **kwargs)

        setattr(owner, name, counted)


@contextmanager
def fresh_state() -> Iterator[ServeConfig]:
    """A server's configuration on an empty workspace and a fresh state file, both removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench-trips-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        yield ServeConfig.build(workspace=workspace, data_dir=Path(tmp) / "state", database=None)


async def run(calls: int, rounds: int) -> dict[str, dict[str, float]]:
    hops = Hops()
    timings: dict[str, list[float]] = {name: [] for name in SERIES}
    trips: dict[str, list[int]] = {name: [] for name in SERIES}
    cpu: dict[str, list[float]] = {name: [] for name in SERIES}
    with fresh_state() as config:
        async with (
            open_runtime(config) as runtime,
            Client(build_server(runtime, transport="memory")) as managed,
            Client(bare_echo_server.server) as bare,
        ):
            for _ in range(rounds):
                for name, (tool, arguments) in SERIES.items():
                    client = bare if name == "bare echo" else managed
                    for n in range(calls + 20):
                        await anyio.lowlevel.checkpoint()  # let what a call left behind (a change notice) go first
                        before, started, used = hops.count, time.perf_counter(), time.process_time()
                        await client.call_tool(tool, arguments)
                        if n >= 20:  # warm-up
                            timings[name].append((time.perf_counter() - started) * 1000)
                            cpu[name].append((time.process_time() - used) * 1000)
                            trips[name].append(hops.count - before)
    base = statistics.median(timings["bare echo"])
    figures: dict[str, dict[str, float]] = {}
    for name, values in timings.items():
        ordered = sorted(values)
        p50 = statistics.median(ordered)
        figures[name] = {
            "p50_ms": round(p50, 3),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
            "ratio_p50": round(p50 / base, 2),
            "cpu_mean_ms": round(statistics.fmean(cpu[name]), 3),
            "round_trips": statistics.median(trips[name]),
        }
    return figures


async def _calls(client: Client, tool: str, arguments: dict[str, Any], count: int) -> None:
    for _ in range(count):
        await client.call_tool(tool, arguments)


async def run_concurrent(clients: int, calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """Each series from `clients` clients at once, `calls` calls in all; rounds interleave the series."""
    rates: dict[str, list[float]] = {name: [] for name in CONCURRENT}
    cpu: dict[str, list[float]] = {name: [] for name in CONCURRENT}
    with fresh_state() as config:
        async with open_runtime(config) as runtime, AsyncExitStack() as stack:
            managed = [await stack.enter_async_context(Client(build_server(runtime, transport="memory"))) for _ in
                       range(clients)]  # fmt: skip
            bare = [await stack.enter_async_context(Client(bare_echo_server.server)) for _ in range(clients)]
            for warm_up in managed:  # a client's first call attaches its session
                await warm_up.call_tool(*SERIES["memory_read"])
            for _ in range(rounds):
                for name in CONCURRENT:
                    tool, arguments = SERIES[name]
                    each = max(1, calls // clients)

                    started, used = time.perf_counter(), time.process_time()
                    async with anyio.create_task_group() as tg:
                        for client in bare if name == "bare echo" else managed:
                            tg.start_soon(_calls, client, tool, arguments, each)
                    rates[name].append(each * clients / (time.perf_counter() - started))
                    cpu[name].append((time.process_time() - used) * 1000 / (each * clients))
    base = statistics.median(rates["bare echo"])
    return {
        name: {
            "calls_per_s": round(statistics.median(rates[name]), 1),
            "ratio": round(statistics.median(rates[name]) / base, 2),
            "cpu_mean_ms": round(statistics.fmean(cpu[name]), 3),
        }
        for name in CONCURRENT
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per series and round (default: 300)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    parser.add_argument(
        "--clients", type=int, default=16, help="clients at once in the concurrent series (default: 16)"
    )
    args = parser.parse_args(argv)
    figures = anyio.run(run, args.calls, args.rounds)
    concurrent = anyio.run(run_concurrent, args.clients, args.calls, args.rounds) if args.clients > 1 else {}
    if args.json:
        print(json.dumps({"sequential": figures, f"{args.clients} clients": concurrent}, indent=2))
        return 0
    print(f"in-process calls, {args.calls} x {args.rounds} per series (ratio: p50 / bare echo p50)")
    print(f"{'series':<20} {'p50 ms':>8} {'p95 ms':>8} {'ratio':>6} {'CPU ms':>7} {'round trips':>12}")
    for name, row in figures.items():
        print(
            f"{name:<20} {row['p50_ms']:>8.3f} {row['p95_ms']:>8.3f} {row['ratio_p50']:>6.2f} "
            f"{row['cpu_mean_ms']:>7.3f} {row['round_trips']:>12g}"
        )
    if concurrent:
        print(f"\n{args.clients} in-process clients at once, {args.calls} calls a series and round (ratio: to bare)")
        print(f"{'series':<20} {'calls/s':>8} {'ratio':>6} {'CPU ms':>7}")
        for name, row in concurrent.items():
            print(f"{name:<20} {row['calls_per_s']:>8.1f} {row['ratio']:>6.2f} {row['cpu_mean_ms']:>7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
