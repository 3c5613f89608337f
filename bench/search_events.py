"""In-process benchmarks of the event search: `session_search_context` over a large event log, and what the FTS5
index costs each tool call when its events are appended.

1. search: a log of tool spans (`span.started` with argument previews, `span.completed` with bounded result
   summaries, the text drawn from bench/memory.py's Zipf language) over 40 sessions of the agent, plus 10 % of
   events from another agent, grown to each `--sizes` step. Queries are common, mid-frequency and rare words,
   markers planted in one event each, paths and identifiers. Timed three ways: `handler` (session_search_context
   in an open read snapshot), `tool` (the whole call through `tools.framework.executor.execute`, its own span events
   included) and the in-run baseline `session_get_events {"limit": 8}` through `execute`. Target: handler p95
   under 10 ms at 100k events.
2. write: one tool call's two events (`span.started` and `span.completed` in one `record`, as the executor
   writes a read's record) in two copies of the search DB, interleaved call by call: `indexed` has the insert
   trigger of before migration 16 (each append indexed at once, the baseline), `unindexed` indexes in batches
   of 64 (`stores.event_search.index_pending`, as now). The difference is what batching saves per call.

It is a benchmark, not a test: it prints figures and exits 0 whatever they are.

    python bench/search_events.py [--sizes 10000,100000] [--queries 40] [--rounds 3] [--writes 2000]
                                  [--seed 7] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sqlite3
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
from memory import Language, Stat, bench_config, progress
from noports import PORTS

from managed_tools.server.connection.attach import attach, detach
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import event_search, events, sessions
from managed_tools.stores.db import Database, Tx
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Attachment, Runtime, ToolContext
from managed_tools.tools.recall.events import ContextSearchArgs, session_search_context

TARGET_P95_MS = 10.0
TARGET_WRITE_MS = 0.2
SESSIONS = 40
FOREIGN_SHARE = 0.1  # events of another agent, which the index must filter out
CHUNK = 5_000  # events per write transaction while building the log
TOOLS = ["write", "edit", "shell_run", "memory_write", "plan_update", "bash", "read", "grep"]


def payloads(lang: Language, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """One tool call's span events: arguments up to 200 characters, a result summary up to 300."""
    rng = lang.rng
    tool = rng.choice(TOOLS)
    text = " ".join(lang.sentence(8, 30))[:200]
    started = {"spanId": f"s{index}", "spanKind": "tool", "toolName": tool, "argsDigest": "0" * 64,
               "args": {"path": lang.path(), "content": text}}  # fmt: skip
    summary = json.dumps({"ok": True, "output": " ".join(lang.sentence(10, 40))})[:300]
    completed = {"spanId": f"s{index}", "spanKind": "tool", "toolName": tool, "result": "success",
                 "durationMs": round(rng.random() * 20, 3), "resultSummary": summary}  # fmt: skip
    return started, completed


@dataclass(frozen=True)
class Query:
    text: str
    tier: str


def make_queries(lang: Language, count: int, markers: list[str]) -> list[Query]:
    tiers = {"common": (1, 300), "mid": (300, 1500), "rare": (1500, 10**9)}
    out: list[Query] = []
    while len(out) < count:
        kind = ["common", "mid", "rare", "marker", "path", "identifier"][len(out) % 6]
        if kind in tiers:
            words = " ".join(lang.content_word(*tiers[kind]) for _ in range(lang.rng.randint(1, 3)))
            out.append(Query(words, kind))
        elif kind == "marker":
            out.append(Query(lang.rng.choice(markers), kind))
        else:
            out.append(Query(lang.path() if kind == "path" else lang.identifier(), kind))
    return out


async def make_sessions(runtime: Runtime, agent: str, count: int) -> list[str]:
    fingerprint = setup_fingerprint(runtime)
    ids: list[str] = []
    async with runtime.db.write() as tx:
        for i in range(count):
            parent = ids[i - 1] if i % 5 and ids else None
            record = await sessions.create_session(tx, agent, parent_id=parent)
            await sessions.open_wake(tx, record.id, transport="bench", setup_fingerprint=fingerprint if i % 4 else "0")
            ids.append(record.id)
    return ids


async def grow_log(
    runtime: Runtime, lang: Language, count: int, *, mine: list[str], foreign: list[str], markers: list[str]
) -> None:
    """`count` more events, two per call, each in a session of ours or (10 %) another agent's."""
    rng = lang.rng
    done = 0
    while done < count:
        async with runtime.db.write() as tx:
            for _ in range(min(CHUNK, count - done) // 2):
                started, completed = payloads(lang, done)
                if rng.random() < 0.002:
                    marker = f"mark{len(markers)}x{rng.randrange(10**6)}"
                    markers.append(marker)
                    completed["resultSummary"] += f" {marker}"
                session = rng.choice(foreign if rng.random() < FOREIGN_SHARE else mine)
                wake = await tx.scalar("SELECT id FROM wakes WHERE session_id = ?", (session,))
                await events.append_event(tx, session, wake, "span.started", started)
                await events.append_event(
                    tx, session, wake, "span.completed", completed, summary=f"{started['toolName']}"
                )
                done += 2


@dataclass
class SearchSize:
    events: int
    build_s: float
    db_mb: float
    hits_p50: float
    handler: Stat
    handler_cpu: Stat
    tool: Stat
    baseline: Stat
    handler_by_tier: dict[str, Stat]
    errors: int

    @property
    def ratio_p50(self) -> float:
        return round(self.tool.p50_ms / self.baseline.p50_ms, 2) if self.baseline.p50_ms else 0.0


@dataclass
class Timings:
    handler: list[float]
    cpu: list[float]
    tool: list[float]
    baseline: list[float]
    by_tier: dict[str, list[float]]
    hits: list[int]
    errors: int


async def time_queries(runtime: Runtime, attachment: Attachment, queries: list[Query], rounds: int) -> Timings:
    log = logging.getLogger("bench.search_events")
    errors = 0
    for q in queries:  # warm-up: one untimed pass
        errors += (await execute(runtime, attachment, PORTS, "session_search_context", {"query": q.text})).is_error
    handler: list[float] = []
    cpu: list[float] = []
    tool: list[float] = []
    baseline: list[float] = []
    by_tier: dict[str, list[float]] = {}
    hits: list[int] = []
    for _ in range(rounds):
        for q in queries:
            async with runtime.db.read() as tx:
                ctx = ToolContext(runtime, attachment, PORTS, tx, anyio.current_time() + 60, log)
                args = ContextSearchArgs.model_validate({"query": q.text})
                t0, c0 = time.perf_counter(), time.process_time()
                out = await session_search_context(ctx, args)
                elapsed = time.perf_counter() - t0
                cpu.append(time.process_time() - c0)
            handler.append(elapsed)
            by_tier.setdefault(q.tier, []).append(elapsed)
            hits.append(out.count)
            t0 = time.perf_counter()
            result = await execute(runtime, attachment, PORTS, "session_search_context", {"query": q.text})
            tool.append(time.perf_counter() - t0)
            errors += result.is_error
            t0 = time.perf_counter()
            await execute(runtime, attachment, PORTS, "session_get_events", {"limit": 8})
            baseline.append(time.perf_counter() - t0)
    return Timings(handler, cpu, tool, baseline, by_tier, hits, errors)


async def run_search(
    root: Path, sizes: list[int], n_queries: int, rounds: int, seed: int
) -> tuple[list[SearchSize], Path]:
    lang = Language(seed)
    markers: list[str] = []
    results: list[SearchSize] = []
    workspace = root / "workspace"
    workspace.mkdir()
    config = bench_config(workspace)
    async with open_runtime(config) as runtime:
        mine = await make_sessions(runtime, runtime.environment.agent_id, SESSIONS)
        foreign = await make_sessions(runtime, "someone-else", 4)
        attachment = await attach(runtime, None, "bench")
        built, build_total = 0, 0.0
        for size in sizes:
            progress(f"  growing the log {built} -> {size} events ...")
            t0 = time.perf_counter()
            await grow_log(runtime, lang, size - built, mine=mine, foreign=foreign, markers=markers)
            build_total += time.perf_counter() - t0
            built = size
            query_lang = Language(seed)
            query_lang.rng = random.Random(seed + 1)
            queries = make_queries(query_lang, n_queries, markers)
            progress(f"  {size} events: timing {len(queries)} queries x {rounds} rounds ...")
            timed = await time_queries(runtime, attachment, queries, rounds)
            db_bytes = sum(p.stat().st_size for p in config.state_path.parent.glob(config.state_path.name + "*"))
            results.append(
                SearchSize(
                    events=size,
                    build_s=round(build_total, 1),
                    db_mb=round(db_bytes / 1e6, 1),
                    hits_p50=statistics.median(timed.hits),
                    handler=Stat.of(timed.handler),
                    handler_cpu=Stat.of(timed.cpu),
                    tool=Stat.of(timed.tool),
                    baseline=Stat.of(timed.baseline),
                    handler_by_tier={tier: Stat.of(s) for tier, s in sorted(timed.by_tier.items())},
                    errors=timed.errors,
                )
            )
        await detach(runtime, attachment)
    return results, config.state_path


@dataclass(frozen=True)
class WriteResult:
    calls: int
    events_in_db: int
    indexed: Stat
    unindexed: Stat
    indexed_cpu: Stat
    unindexed_cpu: Stat
    index_cpu_cost_mean_ms: float
    index_cost_p50_ms: float
    index_cost_mean_ms: float
    ratio_p50: float


async def append_call(
    db: Database, session: str, started: dict[str, Any], completed: dict[str, Any], *, batched: bool
) -> tuple[float, float]:
    """(wall, CPU) seconds to record one call's two events as the executor does (one `record`), with the index's
    batch when one is due (`batched`) or without (the copy whose trigger indexes each append)."""

    async def recording(tx: Tx) -> None:
        await events.append_event(tx, session, None, "span.started", started, touch=False)
        record = await events.append_event(tx, session, None, "span.completed", completed, summary="bench: success")
        if batched:
            await event_search.index_pending(tx, record.seq)

    t0, c0 = time.perf_counter(), time.process_time()
    await db.record(recording)
    return time.perf_counter() - t0, time.process_time() - c0


async def run_writes(state: Path, calls: int, seed: int) -> WriteResult:
    """The same calls recorded in two fresh copies of the search DB, one indexing each append by trigger (before),
    one in batches (now), alternately (copies made the same way, so their layout and cache start equal)."""
    indexed, plain = state.with_name("indexed.db"), state.with_name("unindexed.db")
    with sqlite3.connect(state) as source:
        for target in (indexed, plain):
            with sqlite3.connect(target) as copy:
                source.backup(copy)
    with sqlite3.connect(indexed) as copy:  # the index as it was before migration 16: one insert per append
        copy.execute(
            "CREATE TRIGGER events_fts_ai AFTER INSERT ON events BEGIN INSERT INTO events_fts(rowid, agent, session, "
            "type, body) SELECT seq, agent, session, type, body FROM event_search_docs WHERE seq = NEW.seq; END"
        )
    lang = Language(seed)
    lang.rng = random.Random(seed + 2)
    indexed_db, plain_db = await Database.open(indexed), await Database.open(plain)
    try:
        async with indexed_db.read() as tx:
            session = str(await tx.scalar("SELECT id FROM sessions WHERE agent_id = 'default' LIMIT 1"))
            count = int(await tx.scalar("SELECT count(*) FROM events"))
        with_index: list[tuple[float, float]] = []
        without: list[tuple[float, float]] = []
        warmup = max(20, calls // 10)
        for i in range(warmup + calls):
            started, completed = payloads(lang, i)
            first, second = (indexed_db, plain_db) if i % 2 else (plain_db, indexed_db)
            a = await append_call(first, session, started, completed, batched=first is plain_db)
            b = await append_call(second, session, started, completed, batched=second is plain_db)
            if i >= warmup:
                (with_index if first is indexed_db else without).append(a)
                (without if first is indexed_db else with_index).append(b)
    finally:
        await indexed_db.close()
        await plain_db.close()
    on, off = Stat.of([w for w, _ in with_index]), Stat.of([w for w, _ in without])
    on_cpu, off_cpu = Stat.of([c for _, c in with_index]), Stat.of([c for _, c in without])
    return WriteResult(
        calls=calls,
        events_in_db=count,
        indexed=on,
        unindexed=off,
        indexed_cpu=on_cpu,
        unindexed_cpu=off_cpu,
        index_cpu_cost_mean_ms=round(on_cpu.mean_ms - off_cpu.mean_ms, 3),
        index_cost_p50_ms=round(on.p50_ms - off.p50_ms, 3),
        index_cost_mean_ms=round(on.mean_ms - off.mean_ms, 3),
        ratio_p50=round(on.p50_ms / off.p50_ms, 2) if off.p50_ms else 0.0,
    )


def print_report(results: list[SearchSize], writes: WriteResult, rounds: int) -> None:
    print("session_search_context (ms). handler: in a read snapshot; cpu: the CPU time it took (this process);")
    print(
        f"tool: through execute, span events included; base: session_get_events {{limit: 8}} likewise; {rounds} rounds"
    )
    head = f"{'events':>8} {'build s':>8} {'DB MB':>6} {'hits':>5}"
    print(
        f"{head}  {'handler p50/p95':>16}  {'cpu p50/p95':>13}  {'tool p50/p95':>14}  {'base p50/p95':>13}  tool/base"
    )
    for r in results:
        cells = [(r.handler, 7, 8), (r.handler_cpu, 6, 6), (r.tool, 6, 7), (r.baseline, 6, 6)]
        shown = "  ".join(f"{s.p50_ms:>{a}.2f}/{s.p95_ms:<{b}.2f}" for s, a, b in cells)
        print(f"{r.events:>8} {r.build_s:>8} {r.db_mb:>6} {r.hits_p50:>5g}  {shown}  {r.ratio_p50:>9}")
        tiers = ", ".join(f"{t} {s.p50_ms:.2f}/{s.p95_ms:.2f}" for t, s in r.handler_by_tier.items())
        print(f"{'':>8} handler by query kind (p50/p95): {tiers}; errors {r.errors}")
    last = results[-1]
    verdict = "meets" if last.handler.p95_ms < TARGET_P95_MS else "misses"
    print(f"target: handler p95 < {TARGET_P95_MS} ms at {last.events} events: {verdict} ({last.handler.p95_ms} ms)")
    print()
    print(
        f"index write cost per tool call (2 events, 2 write transactions; {writes.calls} calls, interleaved, "
        f"into a log of {writes.events_in_db} events), ms"
    )
    for label, s, c in (
        ("with the index", writes.indexed, writes.indexed_cpu),
        ("without (baseline)", writes.unindexed, writes.unindexed_cpu),
    ):
        print(
            f"  {label:<19} wall p50 {s.p50_ms:.3f}  p95 {s.p95_ms:.3f}  mean {s.mean_ms:.3f}  cpu mean {c.mean_ms:.3f}"
        )
    verdict = "meets" if writes.index_cost_p50_ms < TARGET_WRITE_MS else "misses"
    print(
        f"  index cost: wall p50 {writes.index_cost_p50_ms:.3f} ms, mean {writes.index_cost_mean_ms:.3f} ms, "
        f"cpu mean {writes.index_cpu_cost_mean_ms:.3f} ms; "
        f"ratio p50 {writes.ratio_p50}; target < {TARGET_WRITE_MS} ms: {verdict}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", help="event log sizes, comma-separated (default: 10000,100000)")
    parser.add_argument("--queries", type=int, help="distinct queries (default: 40)")
    parser.add_argument("--rounds", type=int, help="timed passes over the queries per size (default: 3)")
    parser.add_argument("--writes", type=int, help="timed tool calls per DB in the write part (default: 2000)")
    parser.add_argument("--seed", type=int, default=7, help="log and query seed (default: 7)")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run (explicit options win)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    defaults = {"sizes": "2000,10000", "queries": 12, "rounds": 1, "writes": 200} if args.quick else {
        "sizes": "10000,100000", "queries": 40, "rounds": 3, "writes": 2000}  # fmt: skip
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        sizes = sorted({int(s) for s in str(args.sizes).split(",") if s.strip()})
    except ValueError:
        parser.error("--sizes takes comma-separated integers")
    if not sizes or sizes[0] < 1000 or args.queries < 6 or args.rounds < 1 or args.writes < 10:
        parser.error("--sizes must be >= 1000, --queries >= 6, --rounds >= 1, --writes >= 10")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="managed-tools-bench-search-events-") as tmp:
        results, state = anyio.run(run_search, Path(tmp), sizes, args.queries, args.rounds, args.seed)
        progress(f"write: {args.writes} calls on each DB")
        writes = anyio.run(run_writes, state, args.writes, args.seed)
    progress(f"done in {time.perf_counter() - started:.1f} s")
    if args.json:
        document = {
            "seed": args.seed,
            "target": {"handler_p95_ms": TARGET_P95_MS, "index_cost_ms": TARGET_WRITE_MS},
            "search": [{**asdict(r), "ratio_p50": r.ratio_p50} for r in results],
            "write": asdict(writes),
        }
        print(json.dumps(document, indent=2))
    else:
        print_report(results, writes, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
