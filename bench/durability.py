"""What `synchronous=FULL` costs over `NORMAL` for the writes that must never be lost, in one run.

WAL at NORMAL syncs only at checkpoints: a commit survives a killed process but can be rolled back by an OS crash
or a power cut. FULL syncs the WAL at every commit. One fresh state file per setting (the real `Database`,
migrations and all); the two settings' samples are interleaved, so a busy machine slows both alike. Each sample is
a whole write transaction, commit included, of the real store functions: a memory write (`stores.memory.write`,
replace, ~500 chars), a substrate version commit (`stores.substrate.record_version`, ~2 KB) and an approval
(`stores.approvals.create` then `decide`, two transactions as in the server). Baselines: a bare one-row commit
(what the sync itself costs) and an event append on the autocommit connection (always NORMAL). Prints median and
p95 per series and the FULL/NORMAL ratio. A benchmark: it exits 0 whatever the figures are.

    python bench/durability.py [--writes 300] [--warmup 30] [--dir PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from managed_tools.stores import approvals, events, memory, sessions, substrate
from managed_tools.stores.db import Database, Synchronous
from managed_tools.stores.provenance import Provenance

Op = Callable[[Database, str, int], Awaitable[None]]


async def memory_write(db: Database, session_id: str, n: int) -> None:
    async with db.write() as tx:
        await memory.write(
            tx,
            provenance=Provenance(),
            scope=session_id,
            target="working_buffer",
            agent_id="bench",
            session_id=session_id,
            wake_id=None,
            content=f"note {n}: " + "the quick brown fox jumps over the lazy dog " * 11,
            mode="replace",
            source="memory_write",
            searchable_title="Working buffer",
        )


async def substrate_version(db: Database, session_id: str, n: int) -> None:
    async with db.write() as tx:
        await substrate.record_version(
            tx,
            provenance=Provenance(),
            agent_id="bench",
            session_id=session_id,
            wake_id=None,
            source_path="/workspace/SOUL.md",
            target_path="/workspace/agent/SOUL.md",
            content=f"# Soul {n}\n" + "be kind, be brief, be brave\n" * 75,
        )


async def approval(db: Database, session_id: str, n: int) -> None:
    async with db.write() as tx:
        request = await approvals.create(
            tx,
            session_id=session_id,
            wake_id=None,
            kind="tool_confirmation",
            tool_name="shell_run",
            arguments={"command": f"echo {n}"},
            args_digest=f"{n:064x}",
            channel="out_of_band",
        )
    async with db.write() as tx:
        await approvals.decide(tx, request.id, approved=True, by="bench")


async def event_append(db: Database, session_id: str, n: int) -> None:
    await db.record(lambda tx: events.append_event(tx, session_id, None, "span.started", {"tool": "bench", "n": n}))


async def bare_commit(db: Database, session_id: str, n: int) -> None:
    async with db.write() as tx:
        await tx.execute("CREATE TABLE IF NOT EXISTS bench_rows (n INTEGER, body TEXT)")
        await tx.execute("INSERT INTO bench_rows VALUES (?, ?)", (n, "x" * 200))


SERIES: dict[str, Op] = {
    "bare commit (one row)": bare_commit,
    "memory write": memory_write,
    "substrate version": substrate_version,
    "approval (create+decide)": approval,
    "event append (baseline)": event_append,
}


async def measure(folder: Path, writes: int, warmup: int) -> dict[Synchronous, dict[str, list[float]]]:
    """Both settings side by side, their samples interleaved, so a busy machine slows both alike."""
    modes: tuple[Synchronous, ...] = ("NORMAL", "FULL")
    dbs = {mode: await Database.open(folder / f"{mode.lower()}.db", synchronous=mode) for mode in modes}
    try:
        session_ids = {}
        for mode, db in dbs.items():
            async with db.write() as tx:
                session_ids[mode] = (await sessions.create_session(tx, "bench")).id
        timings: dict[Synchronous, dict[str, list[float]]] = {mode: {} for mode in modes}
        for name, op in SERIES.items():
            for mode in modes:
                for n in range(warmup):
                    await op(dbs[mode], session_ids[mode], -n - 1)
                timings[mode][name] = []
            for n in range(writes):
                for mode in modes if n % 2 else modes[::-1]:
                    start = time.perf_counter()
                    await op(dbs[mode], session_ids[mode], n)
                    timings[mode][name].append((time.perf_counter() - start) * 1000)
        return timings
    finally:
        for db in dbs.values():
            await db.close()


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


async def main(writes: int, warmup: int, folder: str | None, as_json: bool) -> None:
    # The state file's filesystem decides what a sync costs (on tmpfs, nothing): pick it with --dir.
    with tempfile.TemporaryDirectory(prefix="durability-", dir=folder) as tmp:
        runs = await measure(Path(tmp), writes, warmup)
    rows = {name: (summary(runs["NORMAL"][name]), summary(runs["FULL"][name])) for name in SERIES}
    if as_json:
        figures = {
            name: {"normalMs": normal, "fullMs": full, "ratio": [full[0] / normal[0], full[1] / normal[1]]}
            for name, (normal, full) in rows.items()
        }
        print(json.dumps({"writes": writes, "series": figures}, indent=2))
        return
    print(f"{writes} timed transactions per series after {warmup} warm-up; ms, commit included", file=sys.stderr)
    print(f"{'series':<26} {'NORMAL p50':>10} {'p95':>7} {'FULL p50':>9} {'p95':>7} {'ratio p50':>9} {'p95':>6}")
    for name, ((n50, n95), (f50, f95)) in rows.items():
        print(f"{name:<26} {n50:>10.3f} {n95:>7.3f} {f50:>9.3f} {f95:>7.3f} {f50 / n50:>9.1f} {f95 / n95:>6.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--dir", default=None, help="where the state files go (default: the temp dir)")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    anyio.run(main, ns.writes, ns.warmup, ns.dir, ns.json)
