"""Replicas behind nginx: tool calls per second with one and two `serve --transport http` replicas, in one run.

Each setup starts its replicas on a fresh workspace and data dir behind Debian's nginx running deploy/nginx.conf
(tests/support/replica_cluster.py, the harness the tests use; one replica: every route of the config leads to it). For
each number of concurrent clients, that many `mcp.Client`s (2026-07-28, no MCP session, so nginx spreads their
calls round-robin) call as fast as answers come for `--seconds`: calls/s, median and p95 latency. The first setup
(one replica on SQLite) is the baseline of the ratios. `--engines sqlite postgresql` runs the one- and two-replica
setups on each engine in the same run: on PostgreSQL (`serve --database`) each setup gets a fresh database on a
throwaway server the bench starts (Debian's binaries, tests/support/postgres_server.py), or on `--database URL` if
given.

Two workloads: `read` (session_get_events, limit 5) and `write` (memory_write appending to the working buffer,
a durable transaction each). The clients run in this one process, on the same machine as the servers: on a
small machine they compete with the replicas for the cores. A benchmark, not a test: the exit status is 0.

    python bench/replicas.py [--clients 16 64] [--seconds 5] [--workload read write]
                             [--engines sqlite postgresql] [--database URL] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import asyncpg
from mcp import Client
from roundtrip import percentile_95, progress

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.postgres_server import binaries, database_url, running_server  # the tests' harness, on the path just above
from support.replica_cluster import cluster

WORKLOADS: dict[str, tuple[str, dict[str, Any]]] = {
    "read": ("session_get_events", {"limit": 5}),
    "write": ("memory_write", {"target": "working_buffer", "content": "bench line", "mode": "append"}),
}
WARMUP_CALLS = 2  # per client, before the clock starts


@dataclass(frozen=True)
class Setup:
    name: str
    replicas: int
    serve_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Load:
    setup: str
    workload: str
    clients: int
    calls: int
    errors: int
    calls_per_second: float
    p50_ms: float
    p95_ms: float


async def load(url: str, setup: str, workload: str, clients: int, seconds: float) -> Load:
    tool, arguments = WORKLOADS[workload]
    samples: list[float] = []
    errors = 0
    async with AsyncExitStack() as stack:
        connected = [await stack.enter_async_context(Client(url)) for _ in range(clients)]
        for client in connected:
            for _ in range(WARMUP_CALLS):
                await client.call_tool(tool, arguments)
        deadline = time.perf_counter() + seconds

        async def worker(client: Client) -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    failed = (await client.call_tool(tool, arguments)).is_error
                except Exception as exc:  # a protocol or transport error counts as an error, once reported
                    failed = True
                    if not errors:
                        progress(f"first call error: {type(exc).__name__}: {exc}")
                samples.append((time.perf_counter() - t0) * 1000)
                errors += bool(failed)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for client in connected:
                tg.start_soon(worker, client)
        elapsed = time.perf_counter() - started
    return Load(
        setup=setup,
        workload=workload,
        clients=clients,
        calls=len(samples),
        errors=errors,
        calls_per_second=round(len(samples) / elapsed, 1),
        p50_ms=round(statistics.median(samples), 2),
        p95_ms=round(percentile_95(samples), 2),
    )


def measure(setup: Setup, workloads: list[str], client_counts: list[int], seconds: float) -> list[Load]:
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as scratch:
        root = Path(scratch)
        workspace, data_dir = root / "workspace", root / "data"
        workspace.mkdir()
        data_dir.mkdir()
        progress(f"{setup.name}: starting {setup.replicas} replica(s) behind nginx")
        with cluster(workspace, data_dir, root, replicas=setup.replicas, serve_args=setup.serve_args) as running:
            results = []
            for workload in workloads:
                for clients in client_counts:
                    progress(f"{setup.name}: {workload}, {clients} clients for {seconds:g} s")
                    results.append(anyio.run(load, running.url, setup.name, workload, clients, seconds))
            return results


def print_loads(loads: list[Load]) -> None:
    baseline = {(x.workload, x.clients): x for x in loads if x.setup == loads[0].setup}
    header = f"{'setup':<24} {'workload':<8} {'clients':>7} {'calls/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'errors':>6}"
    print(header + f" {'calls/s vs ' + loads[0].setup:>26}")
    print("-" * (len(header) + 27))
    for x in loads:
        ratio = x.calls_per_second / baseline[x.workload, x.clients].calls_per_second
        print(
            f"{x.setup:<24} {x.workload:<8} {x.clients:>7} {x.calls_per_second:>9.1f} {x.p50_ms:>8.2f} "
            f"{x.p95_ms:>8.2f} {x.errors:>6} {ratio:>26.2f}"
        )


@contextmanager
def postgresql(url: str | None) -> Iterator[Callable[[], str]]:
    """Fresh databases on a throwaway server; or always `url` when one is given."""
    if url is not None:
        yield lambda: url
        return
    if binaries() is None:
        raise SystemExit("--engines postgresql needs PostgreSQL's binaries (apt-get install postgresql) or --database")
    with running_server() as server:

        def fresh() -> str:
            name = f"bench_{uuid.uuid4().hex[:12]}"

            async def create() -> None:
                conn = await asyncpg.connect(server)
                try:
                    await conn.execute(f"CREATE DATABASE {name}")
                finally:
                    await conn.close()

            anyio.run(create)
            return database_url(server, name)

        yield fresh


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), nargs="+", default=["read", "write"])
    parser.add_argument("--engines", choices=["sqlite", "postgresql"], nargs="+", default=["sqlite"])
    parser.add_argument("--database", metavar="URL", help="PostgreSQL's setups on this database (implies the engine)")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    engines = list(dict.fromkeys([*args.engines, *(["postgresql"] if args.database else [])]))
    loads: list[Load] = []
    with ExitStack() as stack:
        fresh = stack.enter_context(postgresql(args.database)) if "postgresql" in engines else None
        for engine in engines:
            for replicas in args.replicas:
                name = f"{replicas} replica{'s' * (replicas > 1)} ({'SQLite' if engine == 'sqlite' else 'PostgreSQL'})"
                serve_args = () if fresh is None or engine == "sqlite" else ("--database", fresh())
                loads += measure(Setup(name, replicas, serve_args), args.workload, args.clients, args.seconds)
    if args.json:
        print(json.dumps([asdict(x) for x in loads], indent=2))
    else:
        print_loads(loads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
