"""What memory_search's newer sources cost: indexing a session's shell state when a command ends, and reading
the recent sessions' checkpoint summaries at search time. Each is printed beside an in-run baseline.

1. `finish_command` (the UPDATE that records a command's end, which now also re-indexes the shell state) against
   the same UPDATE without the index (`baseline`). `--commands` ends are timed, each in its own write transaction.
2. `checkpoint_rows` (50 most recently active sessions' latest summaries) against `list_agent_sessions` alone
   (`baseline`, the query it starts with). `--sessions` sessions of `--events` events each.

It is a benchmark, not a test: it prints figures and exits 0 whatever they are.

    python bench/memory_sources.py [--sessions 200] [--events 50] [--commands 200] [--reads 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import events, sessions, shell
from managed_tools.stores.db import Tx
from managed_tools.stores.ids import utc_now
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.memory.search import checkpoint_rows

OUTPUT = "line of output " * 200  # about 3 KB of stdout a command


def _line(name: str, samples: list[float], baseline: list[float]) -> str:
    def q(values: list[float], at: float) -> float:
        return sorted(values)[min(len(values) - 1, int(len(values) * at))] * 1000

    p50, p95 = statistics.median(samples) * 1000, q(samples, 0.95)
    b50 = statistics.median(baseline) * 1000
    return f"{name:<34} p50 {p50:7.3f} ms  p95 {p95:7.3f} ms  baseline p50 {b50:7.3f} ms  ratio {p50 / b50:5.2f}"


async def _timed(runtime: Runtime, write: bool, run: Callable[[Tx], Awaitable[Any]]) -> float:
    async with runtime.db.write() if write else runtime.db.read() as tx:
        start = time.perf_counter()
        await run(tx)
        return time.perf_counter() - start


async def _bench(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp())
    os.environ.setdefault("XDG_STATE_HOME", str(root / "state"))
    (root / "ws").mkdir()
    async with open_runtime(ServeConfig.build(workspace=root / "ws", data_dir=None)) as runtime:
        async with runtime.db.write() as tx:
            for _ in range(args.sessions):
                record = await sessions.create_session(tx, "default")
                for n in range(args.events):
                    await events.append_event(tx, record.id, None, "span.completed", {}, summary=f"bash: ok {n}")
        sid = record.id
        indexed: list[float] = []
        plain: list[float] = []
        for n in range(args.commands):
            for samples, index in ((indexed, True), (plain, False)):
                async with runtime.db.write() as tx:
                    cid = await shell.start_command(
                        tx, sid, "shell", f"echo {n}", args=[], cwd="/workspace", started_at=f"{utc_now()}{n}{index}"
                    )

                async def finish(tx: Tx, cid: str = cid, index: bool = index) -> None:
                    if index:
                        await shell.finish_command(
                            tx, sid, cid, status="completed", exit_code=0, duration_ms=1.0, stdout=OUTPUT, stderr="",
                            truncated=False,
                        )  # fmt: skip
                    else:
                        await tx.execute(
                            "UPDATE shell_commands SET status = 'completed', exit_code = 0, stdout = ? WHERE id = ?",
                            (OUTPUT, cid),
                        )

                samples.append(await _timed(runtime, True, finish))
        reads: list[float] = []
        lists: list[float] = []
        for _ in range(args.reads):

            async def rows(tx: Tx) -> None:
                await checkpoint_rows(cast(ToolContext, SimpleNamespace(tx=tx, agent_id="default", owner="")))

            async def listed(tx: Tx) -> None:
                await sessions.list_agent_sessions(tx, "default", owner=sessions.LOCAL_OWNER, limit=50)

            reads.append(await _timed(runtime, False, rows))
            lists.append(await _timed(runtime, False, listed))
    print(f"{args.sessions} sessions x {args.events} events; {args.commands} command ends; {args.reads} reads")
    print(_line("finish_command + shell index", indexed, plain))
    print(_line("checkpoint_rows (50 sessions)", reads, lists))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--reads", type=int, default=100)
    anyio.run(_bench, parser.parse_args())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
