"""In-process memory benchmarks: `memory_search` over a large corpus, `memory_write`, and a CAS write race.

Three parts, all in one command:

1. search: a synthetic corpus of learnings (Zipf-distributed words from a fixed vocabulary, with path-like
   tokens and identifiers) is indexed at each `--sizes` step, then `--queries` queries are timed three ways:
   `store` (the FTS5/bm25 query `stores.search.search` alone, inside an open read snapshot), `handler` (the
   `memory_search` handler: FTS query, session look-ups, re-ranking and the output model) and `tool` (the
   whole call through `tools.framework.executor.execute`, span events included). Target: tool p95 <= 5 ms at 100k.
2. write: `memory_write` (replace, ~500 characters) through `execute`, and the raw `stores.memory.write` in
   a write transaction, each after a warm-up.
3. race: `--procs` OS processes (multiprocessing, spawn) share one state file and each lands `--per-proc`
   append writes on one shared `session_state`, each conditional on the version it just read, retrying on
   a precondition failure. The document must end with exactly 1 + procs * per_proc versions and every
   marker line once: lost updates must be 0.

It is a benchmark, not a test: it prints figures and exits 0 whatever they are. The corpus and the queries
come from a fixed seed, so two runs search the same texts.

    python bench/memory.py [--sizes 10000,100000] [--queries 50] [--rounds 3] [--writes 500]
                           [--procs 8] [--per-proc 200] [--race-via tools|stores] [--seed 7] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import multiprocessing
import queue
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any, Literal

import anyio
from noports import PORTS

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.connection.attach import attach, detach
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import learnings, memory, search, sessions
from managed_tools.stores.db import fulltext
from managed_tools.stores.errors import DatabaseBusyError, PreconditionError
from managed_tools.stores.provenance import Provenance
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Attachment, Runtime, ToolContext
from managed_tools.tools.framework.context.retrieval import STOPWORDS, build_query, search_parts
from managed_tools.tools.memory.search import CANDIDATES, SearchArgs, memory_search

TARGET_P95_MS = 5.0
TARGET_SIZE = 100_000
DEFAULT_LIMIT = 8  # memory_search's default `limit`; the handler asks the store for max(CANDIDATES, 5 * limit)
CHUNK = 4_000  # documents per write transaction while building the corpus
SESSIONS = 40  # sessions the learnings belong to (30 % of learnings belong to none)
WRITE_CHARS = 500


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- the synthetic language ---------------------------------------------------------------------------------

# The most frequent ranks, as in English text: the query builder drops the first group (its stopwords); the
# second is frequent enough to appear in most documents and is never drawn as a query word.
_FREQUENT = "be was not but we when so can has have will all after before into then than which only also there"
# Real words for the most frequent content ranks, then coined words from these syllables up to the vocabulary size.
_CONTENT = """
test build cache config error release deploy query index schema migration session memory search token request
response timeout retry client server version commit branch merge review issue ticket docs function module package
import export parse format encode decode stream buffer socket thread process worker queue event handler callback
promise future lock mutex transaction rollback snapshot backup restore database table column row record field value
type class object method interface protocol message payload header status code exit signal kernel disk network
latency throughput metric alert dashboard logging trace span profile benchmark fixture mock stub assert coverage
lint mypy ruff pytest python rust golang typescript node docker image container volume mount path file folder
archive upload download sync async await loop task job schedule cron backoff jitter limit quota budget cost price
invoice customer account user admin role permission policy approval consent secret credential password key
certificate tls proxy gateway router endpoint route url domain host port address cluster shard replica leader
follower election consensus raft quorum partition offset topic consumer producer broker kafka redis postgres sqlite
vacuum analyze explain plan step outcome grade criteria rubric evaluation promotion note learning lesson correction
checkpoint resume wake attach detach catalogue registry tool executor output input argument option flag default
override setting environment variable shell command script pipeline stage artifact mirror vendor dependency upgrade
downgrade pin lockfile wheel sdist compiler linker binary symbol debug crash panic stack heap leak garbage pointer
reference borrow lifetime generic trait macro template render layout style theme widget button modal form
validation json yaml toml csv markdown html css svg font color pixel
"""
_SYLLABLES = """
ka ro mi tel van qua zor pen dri lum sa vek tor bal min cor dex fen gal hur jin kol lex mor nep ost pra rin sel tam
ul vor wex yan zel bro cha dom ers fla gri hov ix jun kra lop mun nix oph pel quil rav sto tri und vel wor xen yor zan
"""
FUNCTION_WORDS = sorted(STOPWORDS) + _FREQUENT.split()
CONTENT_WORDS = list(dict.fromkeys(_CONTENT.split()))
SYLLABLES = _SYLLABLES.split()
DIRS = ["src", "tests", "stores", "tools", "server", "docs", "lib", "bench", "scripts", "app"]
EXTS = ["py", "json", "md", "toml", "ts", "rs", "go", "yaml", "sql"]


class Language:
    """A vocabulary of `size` words ranked by frequency, sampled with Zipf weights 1/rank."""

    def __init__(self, seed: int, size: int = 4_000) -> None:
        rng = random.Random(seed)
        content = list(CONTENT_WORDS)
        rng.shuffle(content)
        seen = set(FUNCTION_WORDS) | set(content)
        coined: list[str] = []
        while len(FUNCTION_WORDS) + len(content) + len(coined) < size:
            word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
            if word not in seen:
                seen.add(word)
                coined.append(word)
        self.words = FUNCTION_WORDS + content + coined
        self.first_content = len(FUNCTION_WORDS)
        self.cum_weights = list(itertools.accumulate(1.0 / rank for rank in range(1, len(self.words) + 1)))
        self.rng = rng  # the vocabulary depends on the seed alone; reseed `rng` to draw another stream from it

    def sample(self, count: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cum_weights, k=count)

    def content_word(self, low: int, high: int) -> str:
        """A content word whose content rank (1 = most frequent content word) lies in [low, high)."""
        high = min(high, len(self.words) - self.first_content)
        return self.words[self.first_content + self.rng.randrange(low - 1, high - 1)]

    def path(self) -> str:
        parts = [self.rng.choice(DIRS), *(self.content_word(1, 800) for _ in range(self.rng.randint(1, 2)))]
        text = "/".join(parts) + "." + self.rng.choice(EXTS)
        return text + f":{self.rng.randint(1, 400)}" if self.rng.random() < 0.3 else text

    def identifier(self) -> str:
        a, b = self.content_word(1, 1500), self.content_word(1, 1500)
        shape = self.rng.randrange(4)
        if shape == 0:
            return f"{a}_{b}"
        if shape == 1:
            return f"{a.capitalize()}{b.capitalize()}Error"
        if shape == 2:
            return f"ERR-{self.rng.randint(1000, 9999)}"
        return f"v{self.rng.randint(0, 4)}.{self.rng.randint(0, 20)}.{self.rng.randint(0, 9)}"

    def sentence(self, low: int, high: int) -> list[str]:
        words = self.sample(self.rng.randint(low, high))
        roll = self.rng.random()
        if roll < 0.25:
            words.insert(self.rng.randrange(len(words) + 1), self.path())
        elif roll < 0.45:
            words.insert(self.rng.randrange(len(words) + 1), self.identifier())
        return words


@dataclass(frozen=True)
class Doc:
    kind: Literal["lesson", "correction", "error"]
    title: str
    detail: str
    session: int | None  # index into the corpus's sessions
    promote: bool


def documents(lang: Language) -> Iterator[Doc]:
    rng = lang.rng
    kinds: list[Literal["lesson", "correction", "error"]] = ["lesson", "correction", "error"]
    while True:
        title = " ".join(lang.sample(rng.randint(4, 8))).capitalize()
        detail = " ".join(" ".join(lang.sentence(8, 18)).capitalize() + "." for _ in range(rng.randint(1, 3)))
        session = None if rng.random() < 0.3 else rng.randrange(SESSIONS)
        yield Doc(rng.choices(kinds, weights=(6, 2, 2))[0], title, detail, session, rng.random() < 0.05)


@dataclass(frozen=True)
class Query:
    text: str
    tier: str


def make_queries(lang: Language, count: int, samples: list[Doc]) -> list[Query]:
    """Words of 1 to 3 content words across frequency tiers, plus quoted phrases and path/identifier queries.

    Phrases and paths are taken from the first documents, so every corpus size contains them.
    """
    rng = lang.rng
    tiers = {"common": (1, 300), "mid": (300, 1500), "rare": (1500, 10**9)}
    out: list[Query] = []
    n_phrase = max(1, count // 10)
    n_path = max(1, count // 15)
    n_words = max(1, count - n_phrase - n_path)
    plan = ["common"] * (n_words * 4 // 10) + ["mixed"] * (n_words * 3 // 10)
    plan += ["rare"] * (n_words - len(plan))
    for tier in plan:
        size = rng.randint(1, 3)
        names = [rng.choice(list(tiers)) for _ in range(size)] if tier == "mixed" else [tier] * size
        out.append(Query(" ".join(lang.content_word(*tiers[name]) for name in names), tier))
    content = set(lang.words[lang.first_content :])
    for _ in range(n_phrase):
        while True:
            words = rng.choice(samples).detail.rstrip(".").lower().split()
            start = rng.randrange(len(words) - 1)
            pair = words[start : start + 2]
            if all(w in content for w in pair):
                extra = f" {lang.content_word(1, 300)}" if rng.random() < 0.5 else ""
                out.append(Query(f'"{" ".join(pair)}"{extra}', "phrase"))
                break
    structured = [
        token.rstrip(".").rstrip(":0123456789")
        for doc in samples
        for token in doc.detail.split()
        if "/" in token or "_" in token or token.endswith("Error") or token.startswith("ERR-")
    ]
    out += [Query(rng.choice(structured), "path/id") for _ in range(n_path)]
    return out[:count]


# ---- statistics ---------------------------------------------------------------------------------------------


def pct(samples: list[float], q: int) -> float:
    if len(samples) < 2:
        return samples[0] if samples else 0.0
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


@dataclass(frozen=True)
class Stat:
    n: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    mean_ms: float

    @classmethod
    def of(cls, samples_s: list[float]) -> Stat:
        ms = [s * 1000 for s in samples_s]
        return cls(
            n=len(ms),
            p50_ms=round(statistics.median(ms), 3),
            p95_ms=round(pct(ms, 95), 3),
            max_ms=round(max(ms), 3),
            mean_ms=round(statistics.fmean(ms), 3),
        )


# ---- part 1: memory_search ----------------------------------------------------------------------------------


@dataclass
class SearchSize:
    documents: int
    build_s: float
    build_docs_per_s: float
    db_mb: float
    matches_p50: float
    matches_max: int
    store: Stat
    handler: Stat
    tool: Stat
    tool_by_tier: dict[str, Stat] = field(default_factory=dict)
    errors: int = 0


async def make_sessions(runtime: Runtime) -> list[str]:
    """Sessions the learnings belong to: some children, some that last ran under another setup."""
    agent = runtime.environment.agent_id
    fingerprint = setup_fingerprint(runtime)
    ids: list[str] = []
    async with runtime.db.write() as tx:
        for i in range(SESSIONS):
            parent = ids[i - 1] if i % 5 and ids else None
            record = await sessions.create_session(tx, agent, parent_id=parent, title=f"bench session {i}")
            other = fingerprint if i % 4 else "0" * 64
            await sessions.open_wake(tx, record.id, transport="bench", setup_fingerprint=other)
            ids.append(record.id)
    return ids


async def grow_corpus(runtime: Runtime, docs: Iterator[Doc], count: int, session_ids: list[str]) -> None:
    agent = runtime.environment.agent_id
    done = 0
    while done < count:
        batch = list(itertools.islice(docs, min(CHUNK, count - done)))
        async with runtime.db.write() as tx:
            for doc in batch:
                await learnings.record(
                    tx,
                    agent_id=agent,
                    session_id=None if doc.session is None else session_ids[doc.session],
                    kind=doc.kind,
                    title=doc.title,
                    detail=doc.detail,
                    promote=doc.promote,
                )
        done += len(batch)


async def time_queries(
    runtime: Runtime, attachment: Attachment, queries: list[Query], rounds: int, size: int
) -> tuple[list[float], list[float], list[float], dict[str, list[float]], list[int], int]:
    agent = runtime.environment.agent_id
    parts: list[tuple[list[str], list[str], list[str]]] = []
    for q in queries:
        parts.append(search_parts(build_query(q.text)))
    candidates = max(CANDIDATES, DEFAULT_LIMIT * 3)
    matches: list[int] = []  # texts sharing at least one word with the query: what a naive OR query would score
    async with runtime.db.read() as tx:
        for terms, phrases, fallback in parts:
            any_word = fulltext.match_any([*terms, *fallback], phrases).fts5()
            matches.append(
                int(await tx.scalar("SELECT count(*) FROM search_fts WHERE search_fts MATCH ?", (any_word,)))
            )
    errors = 0
    for q in queries:  # warm-up: one untimed pass through the whole pipeline
        result = await execute(runtime, attachment, PORTS, "memory_search", {"query": q.text})
        errors += result.status != "success"
    store: list[float] = []
    handler: list[float] = []
    tool: list[float] = []
    by_tier: dict[str, list[float]] = {}
    log = logging.getLogger("bench.memory")
    for r in range(rounds):
        progress(f"  {size:>7} docs: timing round {r + 1}/{rounds} ...")
        for q, (terms, phrases, fallback) in zip(queries, parts, strict=True):
            async with runtime.db.read() as tx:
                t0 = time.perf_counter()
                await search.search(tx, agent, terms, phrases, candidates, owner="", fallback_words=fallback)
                store.append(time.perf_counter() - t0)
            async with runtime.db.read() as tx:
                ctx = ToolContext(runtime, attachment, PORTS, tx, anyio.current_time() + 60, log)
                args = SearchArgs.model_validate({"query": q.text})
                t0 = time.perf_counter()
                await memory_search(ctx, args)
                handler.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = await execute(runtime, attachment, PORTS, "memory_search", {"query": q.text})
            elapsed = time.perf_counter() - t0
            errors += result.status != "success"
            tool.append(elapsed)
            by_tier.setdefault(q.tier, []).append(elapsed)
    return store, handler, tool, by_tier, matches, errors


def bench_config(workspace: Path) -> ServeConfig:
    """The server's config with its state beside the temporary workspace (removed with it), never in the
    user's state directory."""
    return ServeConfig.build(workspace=workspace, data_dir=workspace.with_name(f"{workspace.name}.state"))


async def run_search(
    workspace: Path, sizes: list[int], n_queries: int, rounds: int, seed: int
) -> tuple[list[SearchSize], list[Query]]:
    samples = list(itertools.islice(documents(Language(seed)), 1_000))
    query_lang = Language(seed)
    query_lang.rng = random.Random(seed + 1)
    queries = make_queries(query_lang, n_queries, samples)
    docs = documents(Language(seed))  # the same stream as `samples`: the corpus starts with those documents
    results: list[SearchSize] = []
    async with open_runtime(bench_config(workspace)) as runtime:
        attachment = await attach(runtime, None, "bench")
        session_ids = await make_sessions(runtime)
        indexed = 0
        build_total = 0.0
        for size in sorted(sizes):
            progress(f"  indexing {indexed} -> {size} documents ...")
            t0 = time.perf_counter()
            await grow_corpus(runtime, docs, size - indexed, session_ids)
            build = time.perf_counter() - t0
            build_total += build
            indexed = size
            store, handler, tool, by_tier, matches, errors = await time_queries(
                runtime, attachment, queries, rounds, size
            )
            db_bytes = sum(p.stat().st_size for p in runtime.db.local_dir.glob(Path(runtime.db.key).name + "*"))
            results.append(
                SearchSize(
                    documents=size,
                    build_s=round(build_total, 2),
                    build_docs_per_s=round(size / build_total),
                    db_mb=round(db_bytes / 1e6, 1),
                    matches_p50=statistics.median(matches),
                    matches_max=max(matches),
                    store=Stat.of(store),
                    handler=Stat.of(handler),
                    tool=Stat.of(tool),
                    tool_by_tier={tier: Stat.of(s) for tier, s in sorted(by_tier.items())},
                    errors=errors,
                )
            )
        await detach(runtime, attachment)
    return results, queries


# ---- part 2: memory_write -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteResult:
    writes: int
    warmup: int
    content_chars: int
    tool: Stat
    store: Stat
    errors: int


def paragraphs(lang: Language, count: int) -> list[str]:
    out = []
    for _ in range(count):
        words: list[str] = []
        while len(" ".join(words)) < WRITE_CHARS:
            words += lang.sentence(8, 18)
        out.append(" ".join(words)[:WRITE_CHARS])
    return out


async def run_writes(workspace: Path, writes: int, seed: int) -> WriteResult:
    warmup = max(10, writes // 10)
    lang = Language(seed)
    lang.rng = random.Random(seed + 2)
    texts = paragraphs(lang, 64)
    errors = 0
    async with open_runtime(bench_config(workspace)) as runtime:
        attachment = await attach(runtime, None, "bench")
        tool: list[float] = []
        for i in range(warmup + writes):
            arguments = {"target": "session_state", "content": texts[i % len(texts)], "mode": "replace"}
            t0 = time.perf_counter()
            result = await execute(runtime, attachment, PORTS, "memory_write", arguments)
            elapsed = time.perf_counter() - t0
            errors += result.status != "success"
            if i >= warmup:
                tool.append(elapsed)
        store: list[float] = []
        for i in range(warmup + writes):
            t0 = time.perf_counter()
            async with runtime.db.write() as tx:
                await memory.write(
                    tx,
                    provenance=Provenance(),
                    scope=attachment.session_id,
                    target="working_buffer",
                    agent_id=runtime.environment.agent_id,
                    session_id=attachment.session_id,
                    wake_id=attachment.wake_id,
                    content=texts[i % len(texts)],
                    mode="replace",
                    source="memory_write",
                    searchable_title=f"working_buffer of session {attachment.session_id}",
                )
            elapsed = time.perf_counter() - t0
            if i >= warmup:
                store.append(elapsed)
        await detach(runtime, attachment)
    return WriteResult(writes, warmup, WRITE_CHARS, Stat.of(tool), Stat.of(store), errors)


# ---- part 3: the CAS race -----------------------------------------------------------------------------------

RACE_HEADER = "# race"
RACE_TIMEOUT_S = 900
RACE_START_TIMEOUT_S = 120


@dataclass(frozen=True)
class WorkerReport:
    proc: int
    landed: int
    conflicts: int
    busy: int
    started: float
    finished: float
    land_s: list[float]


@dataclass(frozen=True)
class RaceResult:
    via: str
    procs: int
    per_proc: int
    wall_s: float
    writes_per_s: float
    conflicts: int
    conflicts_per_write: float
    busy_errors: int
    time_to_land: Stat
    versions: int
    expected_versions: int
    markers_missing: int
    markers_duplicated: int
    lost_updates: int


@dataclass(frozen=True)
class RaceJob:
    """What one racing process is told (pickled to the spawned process)."""

    workspace: str
    session_id: str
    proc: int
    per_proc: int
    via: Literal["tools", "stores"]


Attempt = Literal["landed", "conflict", "busy"]


async def _attempt_tools(runtime: Runtime, attachment: Attachment, marker: str) -> Attempt:
    """memory_read for the latest version, then memory_write conditional on it, both through the executor."""
    read = await execute(runtime, attachment, PORTS, "memory_read", {"target": "session_state", "maxChars": 1})
    if read.structured is None:
        if read.error_kind == "busy":
            return "busy"
        raise RuntimeError(f"memory_read failed: {read.text}")
    arguments = {
        "target": "session_state",
        "content": marker,
        "mode": "append",
        "expectedVersionId": read.structured["versionId"],
    }
    result = await execute(runtime, attachment, PORTS, "memory_write", arguments)
    if result.status == "success":
        return "landed"
    if result.error_kind == "busy":
        return "busy"
    if "precondition failed" in result.text:
        return "conflict"
    raise RuntimeError(f"memory_write failed: {result.text}")


async def _attempt_stores(runtime: Runtime, attachment: Attachment, marker: str) -> Attempt:
    """The same through the stores: a read snapshot for the version, then `memory.write` in `db.write()`."""
    session_id = attachment.session_id
    async with runtime.db.read() as tx:
        version = (await memory.read(tx, session_id, "session_state")).version_id
    try:
        async with runtime.db.write() as tx:
            await memory.write(
                tx,
                provenance=Provenance(),
                scope=session_id,
                target="session_state",
                agent_id=runtime.environment.agent_id,
                session_id=session_id,
                wake_id=attachment.wake_id,
                content=marker,
                mode="append",
                source="memory_write",
                expected_version_id=version,
                searchable_title=f"session_state of session {session_id}",
            )
    except PreconditionError:
        return "conflict"
    except DatabaseBusyError:
        return "busy"
    return "landed"


async def _race_loop(job: RaceJob, barrier: Barrier) -> WorkerReport:
    attempt = _attempt_tools if job.via == "tools" else _attempt_stores
    config = bench_config(Path(job.workspace))
    async with open_runtime(config) as runtime:
        attachment = await attach(runtime, job.session_id, "bench")
        counts: Counter[Attempt] = Counter()
        land: list[float] = []
        barrier.wait(timeout=RACE_START_TIMEOUT_S)  # every process attached: start together
        started = time.time()
        for i in range(job.per_proc):
            marker = f"p{job.proc}-{i}"
            t0 = time.perf_counter()
            while (outcome := await attempt(runtime, attachment, marker)) != "landed":
                counts[outcome] += 1
            land.append(time.perf_counter() - t0)
        finished = time.time()
        await detach(runtime, attachment)
    return WorkerReport(job.proc, job.per_proc, counts["conflict"], counts["busy"], started, finished, land)


def race_worker(job: RaceJob, barrier: Barrier, out: Queue[Any]) -> None:
    """One racing process (spawned): attach to the shared session, wait for the others, then write."""
    try:
        out.put(asdict(anyio.run(_race_loop, job, barrier)))
    except BaseException as exc:  # the parent reports it; a benchmark never crashes on a worker
        barrier.abort()
        out.put({"proc": job.proc, "error": f"{type(exc).__name__}: {exc}"})


async def _prepare_race(workspace: Path) -> str:
    async with open_runtime(bench_config(workspace)) as runtime:
        attachment = await attach(runtime, None, "bench")
        result = await execute(
            runtime, attachment, PORTS, "memory_write", {"target": "session_state", "content": RACE_HEADER}
        )
        if result.status != "success":
            raise RuntimeError(f"could not create the shared document: {result.text}")
        await detach(runtime, attachment)
    return attachment.session_id


async def _check_race(workspace: Path, session_id: str) -> tuple[int, str]:
    async with open_runtime(bench_config(workspace)) as runtime, runtime.db.read() as tx:
        versions = int(
            await tx.scalar(
                "SELECT count(*) FROM memory_versions WHERE scope = ? AND target = 'session_state'", (session_id,)
            )
        )
        content = (await memory.read(tx, session_id, "session_state")).content
    return versions, content


def run_race(workspace: Path, procs: int, per_proc: int, via: Literal["tools", "stores"]) -> RaceResult | str:
    session_id = anyio.run(_prepare_race, workspace)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs)
    out: Queue[Any] = ctx.Queue()
    workers = [
        ctx.Process(target=race_worker, args=(RaceJob(str(workspace), session_id, p, per_proc, via), barrier, out))
        for p in range(procs)
    ]
    for w in workers:
        w.start()
    try:
        reports = [out.get(timeout=RACE_TIMEOUT_S) for _ in workers]
    except queue.Empty:
        reports = [{"error": f"no report within {RACE_TIMEOUT_S} s"}]
    for w in workers:
        w.join(timeout=10)
        if w.is_alive():
            w.terminate()
    failed = [r["error"] for r in reports if "error" in r]
    if failed:
        return f"race workers failed: {failed}"
    versions, content = anyio.run(_check_race, workspace, session_id)
    lines = Counter(line for line in content.splitlines() if line and line != RACE_HEADER)
    expected = {f"p{p}-{i}" for p in range(procs) for i in range(per_proc)}
    missing = len(expected - set(lines))
    duplicated = sum(1 for marker in expected if lines[marker] > 1)
    unknown = sum(1 for line in lines if line not in expected)
    landed = sum(r["landed"] for r in reports)
    conflicts = sum(r["conflicts"] for r in reports)
    wall = max(r["finished"] for r in reports) - min(r["started"] for r in reports)
    land = [s for r in reports for s in r["land_s"]]
    expected_versions = 1 + procs * per_proc
    return RaceResult(
        via=via,
        procs=procs,
        per_proc=per_proc,
        wall_s=round(wall, 2),
        writes_per_s=round(landed / wall, 1),
        conflicts=conflicts,
        conflicts_per_write=round(conflicts / landed, 2),
        busy_errors=sum(r["busy"] for r in reports),
        time_to_land=Stat.of(land),
        versions=versions,
        expected_versions=expected_versions,
        markers_missing=missing,
        markers_duplicated=duplicated + unknown,
        lost_updates=max(missing, expected_versions - versions),
    )


# ---- output -------------------------------------------------------------------------------------------------


def print_report(
    search_results: list[SearchSize], queries: list[Query], writes: WriteResult, race: RaceResult | str, rounds: int
) -> None:
    tiers = Counter(q.tier for q in queries)
    mix = ", ".join(f"{n} {tier}" for tier, n in tiers.items())
    print(f"memory_search: {len(queries)} queries ({mix}) x {rounds} rounds after one warm-up pass\n")
    header = f"{'docs':>8} {'build s':>8} {'docs/s':>7} {'DB MB':>6} {'matches p50/max':>16}  {'series':<8}"
    print(header + f" {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'mean ms':>8}")
    print("-" * (len(header) + 36))
    for r in search_results:
        lead = (
            f"{r.documents:>8} {r.build_s:>8.1f} {r.build_docs_per_s:>7} {r.db_mb:>6.1f} "
            f"{f'{r.matches_p50:g}/{r.matches_max}':>16}  "
        )
        for name, s in (("store", r.store), ("handler", r.handler), ("tool", r.tool)):
            print(f"{lead}{name:<8} {s.p50_ms:>8.3f} {s.p95_ms:>8.3f} {s.max_ms:>8.3f} {s.mean_ms:>8.3f}")
            lead = " " * len(lead)
        per_tier = "  ".join(f"{t} {s.p50_ms:.2f}/{s.p95_ms:.2f}" for t, s in r.tool_by_tier.items())
        print(f"{'':>8} tool p50/p95 ms by query kind: {per_tier}")
        if r.errors:
            print(f"{'':>8} {r.errors} memory_search calls did not succeed")
    largest = [r for r in search_results if r.documents == TARGET_SIZE]
    if largest:
        p95 = largest[0].tool.p95_ms
        verdict = "met" if p95 <= TARGET_P95_MS else "NOT met"
        print(f"\ntarget: tool p95 <= {TARGET_P95_MS:g} ms at {TARGET_SIZE} docs: {p95:.3f} ms -> {verdict}")

    print(
        f"\nmemory_write (replace, {writes.content_chars} chars): {writes.writes} timed after {writes.warmup} warm-up"
    )
    for name, s in (("tool", writes.tool), ("store", writes.store)):
        print(f"  {name:<6} p50 {s.p50_ms:.3f} ms   p95 {s.p95_ms:.3f} ms   max {s.max_ms:.3f} ms")
    if writes.errors:
        print(f"  {writes.errors} memory_write calls did not succeed")

    if isinstance(race, str):
        print(f"\nCAS race: {race}")
        return
    print(f"\nCAS race ({race.via}): {race.procs} processes x {race.per_proc} conditional appends on one session_state")
    print(f"  wall time            {race.wall_s:.2f} s")
    print(f"  landed writes/s      {race.writes_per_s:.1f}")
    print(f"  retries per write    {race.conflicts_per_write:.2f}  ({race.conflicts} precondition failures)")
    print(f"  busy errors          {race.busy_errors}")
    t = race.time_to_land
    print(f"  time to land         p50 {t.p50_ms:.1f} ms   p95 {t.p95_ms:.1f} ms   max {t.max_ms:.1f} ms")
    print(f"  versions             {race.versions} (expected {race.expected_versions})")
    print(f"  markers missing/dup  {race.markers_missing}/{race.markers_duplicated}")
    print(f"  lost updates         {race.lost_updates}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", help="corpus sizes, comma-separated (default: 10000,100000)")
    parser.add_argument("--queries", type=int, help="distinct queries (default: 50)")
    parser.add_argument("--rounds", type=int, help="timed passes over the queries per size (default: 3)")
    parser.add_argument("--writes", type=int, help="timed memory_write calls (default: 500)")
    parser.add_argument("--procs", type=int, help="racing processes (default: 8)")
    parser.add_argument("--per-proc", type=int, help="writes each racing process lands (default: 200)")
    parser.add_argument("--race-via", choices=["tools", "stores"], default="tools", help="race through execute "
                        "(memory_read + memory_write) or through the stores directly (default: tools)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=7, help="corpus and query seed (default: 7)")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run (explicit options win)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    quick = {"sizes": "1000,5000", "queries": 20, "rounds": 2, "writes": 100, "procs": 4, "per_proc": 25}
    full = {"sizes": "10000,100000", "queries": 50, "rounds": 3, "writes": 500, "procs": 8, "per_proc": 200}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error("--sizes takes comma-separated integers")
    if not sizes or sizes[0] < 100 or args.queries < 5 or args.rounds < 1 or args.writes < 2:
        parser.error("--sizes must be >= 100, --queries >= 5, --rounds >= 1, --writes >= 2")
    if args.procs < 1 or args.per_proc < 1:
        parser.error("--procs and --per-proc must be at least 1")

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="managed-tools-bench-memory-") as tmp:
        root = Path(tmp)
        for name in ("search", "write", "race"):
            (root / name).mkdir()
        progress(f"search: sizes {sizes}, {args.queries} queries x {args.rounds} rounds")
        search_results, queries = anyio.run(run_search, root / "search", sizes, args.queries, args.rounds, args.seed)
        progress(f"write: {args.writes} memory_write calls")
        writes = anyio.run(run_writes, root / "write", args.writes, args.seed)
        progress(f"race: {args.procs} processes x {args.per_proc} CAS writes via {args.race_via}")
        race = run_race(root / "race", args.procs, args.per_proc, args.race_via)
    progress(f"done in {time.perf_counter() - started:.1f} s")

    if args.json:
        document = {
            "seed": args.seed,
            "target": {"tool_p95_ms": TARGET_P95_MS, "documents": TARGET_SIZE},
            "queries": [asdict(q) for q in queries],
            "search": [asdict(r) for r in search_results],
            "write": asdict(writes),
            "race": race if isinstance(race, str) else asdict(race),
        }
        print(json.dumps(document, indent=2))
    else:
        print_report(search_results, queries, writes, race, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
