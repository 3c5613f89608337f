"""How much the state grows per tool call, what a memory_write writes to the WAL, and what a retention policy keeps.

Three parts, in process (tools.framework.executor.execute, one session, wakes of `--per-wake` calls):

1. growth: `--calls` calls of `memory_read` (a read: its two span events and their index) and then of
   `memory_write` (a replace of ~200 characters: a new version, the search index, its events); the state file
   and its WAL are checkpointed (TRUNCATE) before and after, and the difference divided by the calls.
2. WAL: the WAL frames (4 KB pages) one `memory_write` and one `memory_read` append, median over `--samples`.
3. retention: the same read workload twice on fresh state files, without a policy (the baseline) and with
   `eventsMaxPerSession` (`--keep`), applied after each wake as each start-up applies it; the file's size every
   `--calls` calls, up to `--rounds` x `--calls`. Skipped on a tree without stores/retention.py.

Run it on another checkout's code (the before figures) with PYTHONPATH=<that checkout>. It is a benchmark, not a
test: it prints figures (median per call) and exits 0.

    python bench/state_growth.py [--calls 1000] [--per-wake 50] [--samples 50] [--keep 500] [--rounds 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from noports import PORTS

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.connection.attach import attach, detach
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.db.wal_check import read_wal
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Runtime

READ = ("memory_read", {"target": "session_state"})


def write_call(n: int) -> tuple[str, dict[str, Any]]:
    return "memory_write", {"target": "session_state", "content": f"note {n}: " + "words of a working note " * 8}


def settled_size(state: Path) -> int:
    """The state's bytes once its WAL is checkpointed into it and truncated."""
    with sqlite3.connect(state) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = state.with_name(state.name + "-wal")
    return state.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


async def run_calls(
    runtime: Runtime, session: str | None, calls: int, per_wake: int, *, call: Any, after_wake: Any = None
) -> str:
    done = 0
    while done < calls:
        attachment = await attach(runtime, session, "bench")
        session = attachment.session_id
        for _ in range(min(per_wake, calls - done)):
            name, arguments = call(done)
            result = await execute(runtime, attachment, PORTS, name, arguments)
            assert not result.is_error, result.text
            done += 1
        await detach(runtime, attachment)
        if after_wake is not None:
            await after_wake(runtime)
    assert session is not None
    return session


def frames(state: Path) -> int:
    wal = read_wal(state)
    return 0 if wal is None else wal.frames


async def wal_pages(runtime: Runtime, state: Path, samples: int) -> dict[str, float]:
    attachment = await attach(runtime, None, "bench")
    found: dict[str, list[int]] = {"memory_write": [], "memory_read": []}
    for n in range(samples):
        for name, arguments in (write_call(n), READ):
            settled_size(state)
            before = frames(state)
            await execute(runtime, attachment, PORTS, name, arguments)
            found[name].append(frames(state) - before)
    await detach(runtime, attachment)
    return {name: statistics.median(values) for name, values in found.items()}


async def growth(tmp: Path, calls: int, per_wake: int, samples: int) -> dict[str, Any]:
    workspace = tmp / "growth"
    workspace.mkdir()
    config = ServeConfig.build(workspace=workspace, data_dir=tmp / "growth.state")
    state = config.state_path
    figures: dict[str, Any] = {}
    async with open_runtime(config) as runtime:
        session = await run_calls(runtime, None, 50, per_wake, call=lambda n: READ)  # warm-up
        for label, call in (("memory_read", lambda n: READ), ("memory_write", write_call)):
            before = settled_size(state)
            await run_calls(runtime, session, calls, per_wake, call=call)
            figures[f"{label}_bytes_per_call"] = round((settled_size(state) - before) / calls)
        figures["wal_pages_per_call"] = await wal_pages(runtime, state, samples)
    return figures


async def retention_series(tmp: Path, calls: int, per_wake: int, keep: int | None, rounds: int) -> list[int]:
    from managed_tools.stores import retention

    name = "kept" if keep is not None else "unbounded"
    workspace = tmp / name
    workspace.mkdir()
    config = ServeConfig.build(workspace=workspace, data_dir=tmp / f"{name}.state")
    policy = retention.Retention(max_per_session=keep)

    async def apply(runtime: Runtime) -> None:
        await retention.apply(runtime.db, policy)

    sizes: list[int] = []
    async with open_runtime(config) as runtime:
        session = None
        for _ in range(rounds):
            session = await run_calls(runtime, session, calls, per_wake, call=lambda n: READ, after_wake=apply)
            sizes.append(settled_size(config.state_path))
    return sizes


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as name:
        tmp = Path(name)
        document = await growth(tmp, args.calls, args.per_wake, args.samples)
        try:
            import managed_tools.stores.retention  # noqa: F401
        except ImportError:
            return document
        document["size_every_calls"] = args.calls
        document["unbounded_bytes"] = await retention_series(tmp, args.calls, args.per_wake, None, args.rounds)
        document["kept_bytes"] = await retention_series(tmp, args.calls, args.per_wake, args.keep, args.rounds)
        document["keep"] = args.keep
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1000, help="calls per growth series and per size step")
    parser.add_argument("--per-wake", type=int, default=50, help="calls per wake (default: 50)")
    parser.add_argument("--samples", type=int, default=50, help="WAL samples per tool (default: 50)")
    parser.add_argument("--keep", type=int, default=500, help="retention eventsMaxPerSession (default: 500)")
    parser.add_argument("--rounds", type=int, default=4, help="size steps of the retention part (default: 4)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    document = anyio.run(run, args)
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(f"state growth over {args.calls} calls (wakes of {args.per_wake}):")
    print(f"  memory_read   {document['memory_read_bytes_per_call']:>7} bytes/call")
    print(f"  memory_write  {document['memory_write_bytes_per_call']:>7} bytes/call")
    pages = document["wal_pages_per_call"]
    print(f"WAL pages appended per call (median of {args.samples}): ", end="")
    print(", ".join(f"{name} {value:g}" for name, value in pages.items()))
    if "kept_bytes" in document:
        print(f"state size every {args.calls} read calls, no policy (baseline) vs eventsMaxPerSession={args.keep}:")
        for n, (free, kept) in enumerate(zip(document["unbounded_bytes"], document["kept_bytes"], strict=True)):
            print(
                f"  {(n + 1) * args.calls:>7} calls  {free / 1024:>9.0f} KB  {kept / 1024:>9.0f} KB  {kept / free:.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
