"""In-process benchmark of the `grep` and `glob` tools against the `rg` command line on a large generated tree.

The bench generates a tree of `--files` files (default 50,000) in nested directories: small text files with a
fixed seed, a .gitignore that ignores one subtree, a few binary files, a `.git` directory, and rare needles
planted in known files. On that tree it times, for each query, interleaved in every repetition:

* `tool`: the whole call `tools.executor.execute(runtime, attachment, ports, "grep" | "glob", {...})`: parsing,
  span events, the read transaction and the handler, which runs rg through `sandbox/ripgrep.py`;
* `store`: `sandbox.ripgrep.search` / `sandbox.ripgrep.list_files` alone (rg spawned through asyncio, its output
  parsed in Python);
* `rg`: the `rg` command line as a subprocess with the argv the store builds (`--sort path` included), its
  stdout read to completion: the baseline of the issue's target, tool/rg <= 1.5;
* `rg -j`: the same argv without `--sort path`, which lets rg search with all cores (what people type).

Some rows do less work than rg: grep stops rg once it holds `limit` matches, so a common word with limit 20
reads a fraction of the tree. The table says so in its `work` column, and the like-for-like rows (every match
collected by both) are the ones to read the ratio from. A breakdown section then times the parts the tools add
(process spawn, the regex pre-check, JSON parsing, glob's directory derivation and matching).

It is a benchmark, not a test: it prints figures and exits 0 whatever they are.

    python bench/files.py [--files 50000] [--reps 5] [--seed 5] [--quick] [--json] [--keep]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from noports import PORTS

from managed_tools.sandbox import ripgrep
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.connection.attach import attach, detach
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.files.tools import MAX_SCAN, GrepHit, GrepOutput, _directories, _preview, glob_regex
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Attachment, Runtime

TARGET_RATIO = 1.5
FILES_PER_DIR = 20
TOPS = ["src", "tests", "docs", "lib", "pkg", "tools", "scripts", "examples"]
EXTS = {"py": 34, "ts": 12, "rs": 10, "go": 10, "md": 8, "json": 8, "txt": 7, "yaml": 6, "toml": 5}
IGNORED_DIR = "node_modules"  # listed in the tree's .gitignore

# Needles: rare strings planted in known files. Copies in the ignored subtree, a binary file and .git must
# never be found, so each one's expected hit count is its visible text copies only.
RARE = "zebra_quartz_needle"
RARE_COPIES = 5
CASE_VARIANTS = ("CaseNeedleMarker", "caseneedlemarker", "CASENEEDLEMARKER")
CASE_COPIES = 3  # of each variant
REGEX_LINE = "    fn load_needle{n}(&self) -> u32 {{"
REGEX_QUERY = r"fn\s+\w+_needle\d+\("
REGEX_COPIES = 4
MEDIUM = "medium_marker_token"
MEDIUM_MAX = 800  # planted in min(MEDIUM_MAX, files // 10) files: under grep's maximum limit of 1000
COMMON = "return"

_WORDS = """
cache config error release deploy query index schema session memory search token request response timeout retry
client server version commit branch merge review parse format encode decode stream buffer socket thread process
worker queue event handler callback lock table column row record field value type object method message payload
header status signal disk network latency metric trace span profile fixture mock path file folder archive upload
task job schedule backoff limit quota budget user admin role policy secret proxy gateway router endpoint route
host port cluster shard replica leader topic consumer producer broker plan step outcome grade note lesson
checkpoint tool executor output input argument option flag default setting variable shell command script
pipeline stage artifact mirror vendor dependency wheel binary symbol debug stack heap pointer widget button form
validation account invoice price cost summary report draft label filter sort order group owner member
"""
WORDS = _WORDS.split()
TEMPLATES = [
    "def {a}_{b}({c}, {d}):",
    "    return {a}({b}) + {c}",
    "import {a}.{b}",
    "from {a}.{b} import {C}{D}",
    "    {a} = {b}.{c}({d})",
    "    {a}_{b} = {n}",
    "# {a} {b} {c} {d} {e}",
    "    if {a} is not None and {b} > {n}:",
    "class {A}{B}({C}):",
    "    for {a} in {b}.{c}():",
    "        return self.{a}_{b}",
    "fn {a}_{b}(x: &{A}) -> Result<{B}, Error> {{",
    "    let {a} = {b}.{c}()?;",
    "const {a} = await {b}.{c}({d});",
    "export function {a}{B}({c}: {D}): void {{",
    "func {A}{B}(ctx context.Context) error {{",
    '  "{a}_{b}": "{c}",',
    "{a}_{b}: {c}",
    "The {a} {b} is {c} when the {d} {e} the {f}.",
    "See `{a}.{b}` for the {c} {d}.",
    "}}",
    "",
]


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- the tree ---------------------------------------------------------------------------------------------


@dataclass
class Tree:
    files: int  # what grep and glob see: text and binary files outside the ignored subtree and .git
    text_files: int
    binary_files: int
    ignored_files: int  # under the ignored subtree and in .git
    directories: int  # directories holding visible files (what glob kind=directory lists)
    megabytes: float
    build_s: float
    expected: dict[str, int] = field(default_factory=dict)  # needle -> visible files holding it


def _line_pool(rng: random.Random, size: int = 4_000) -> list[str]:
    pool = []
    for _ in range(size):
        w = rng.choices(WORDS, k=6)
        caps = [x.capitalize() for x in w]
        pool.append(
            rng.choice(TEMPLATES).format(
                a=w[0], b=w[1], c=w[2], d=w[3], e=w[4], f=w[5], A=caps[0], B=caps[1], C=caps[2], D=caps[3],
                n=rng.randint(0, 999),
            )
        )  # fmt: skip
    return pool


def _leaf_dirs(count: int) -> list[str]:
    """`count` directories three levels deep (top/pkg_NN/mod_NN); every third also gets an `impl` child."""
    fan = math.ceil(math.sqrt(count / len(TOPS)))
    out = []
    for i in range(count):
        j = i // len(TOPS)
        out.append(f"{TOPS[i % len(TOPS)]}/pkg_{j % fan:02d}/mod_{j // fan:02d}")
    return out


def _write(path: Path, data: str | bytes) -> int:
    raw = data.encode() if isinstance(data, str) else data
    with open(path, "wb") as handle:
        handle.write(raw)
    return len(raw)


def _layout(rng: random.Random, n_files: int) -> tuple[list[str], set[int]]:
    """Relative paths of the visible files (FILES_PER_DIR per directory, 3-4 levels deep); which are binary."""
    exts, weights = list(EXTS), list(EXTS.values())
    paths: list[str] = []
    for i, leaf in enumerate(_leaf_dirs(math.ceil(n_files / FILES_PER_DIR))):
        for j in range(FILES_PER_DIR):
            if len(paths) == n_files:
                break
            folder = f"{leaf}/impl" if i % 3 == 0 and j >= FILES_PER_DIR * 2 // 3 else leaf
            if j == 0 and i % 4 == 0:
                paths.append(f"{folder}/README.md")
            else:
                paths.append(f"{folder}/{rng.choice(WORDS)}_{j}.{rng.choices(exts, weights)[0]}")
    # A few hidden files that --hidden makes visible.
    paths[0:3] = [".github/workflows/ci.yaml", ".config/settings.json", ".editorconfig"]
    binary_at = set(rng.sample(range(3, n_files), max(3, n_files // 2_000)))
    for index in binary_at:
        paths[index] = paths[index].rsplit(".", 1)[0] + ".bin"
    return paths, binary_at


def _plant(rng: random.Random, text_at: list[int], n_files: int) -> tuple[dict[int, list[str]], dict[str, int]]:
    """Needle lines by file index (each needle copy in a distinct text file), and each needle's visible count."""
    medium_copies = min(MEDIUM_MAX, n_files // 10)
    lines = [f"    # {RARE}: the rare one"] * RARE_COPIES
    lines += [f"{variant} = {n}" for variant in CASE_VARIANTS for n in range(CASE_COPIES)]
    lines += [REGEX_LINE.format(n=n) for n in range(REGEX_COPIES)]
    lines += [f"    x = {MEDIUM}({n})" for n in range(medium_copies)]
    planted: dict[int, list[str]] = {}
    for index, line in zip(rng.sample(text_at, len(lines)), lines, strict=True):
        planted.setdefault(index, []).append(line)
    expected = {
        RARE: RARE_COPIES,
        CASE_VARIANTS[0]: CASE_COPIES,
        CASE_VARIANTS[0].lower(): CASE_COPIES * len(CASE_VARIANTS),
        REGEX_QUERY: REGEX_COPIES,
        MEDIUM: medium_copies,
    }
    return planted, expected


def _write_hidden_from_tools(root: Path, rng: random.Random, pool: list[str], n_files: int) -> int:
    """The ignored subtree (5 % more files), a .git directory and an ignored *.log, all holding needles."""
    _write(root / ".gitignore", f"{IGNORED_DIR}/\n*.log\n")
    ignored = max(20, n_files // 20)
    for k in range(ignored):
        folder = root / IGNORED_DIR / f"dep_{k // 200:02d}" / "dist"
        if k % 200 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        extra = [f"// {RARE}", f"x = {MEDIUM}()", CASE_VARIANTS[0]] if k == 0 else []
        _write(folder / f"chunk_{k}.js", "\n".join(rng.choices(pool, k=30) + extra) + "\n")
    git = root / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    _write(git / "HEAD", "ref: refs/heads/main\n")
    _write(git / "config", "[core]\n\trepositoryformatversion = 0\n")
    _write(git / "refs" / "heads" / "main", "0" * 40 + "\n")
    _write(git / "COMMIT_EDITMSG", f"{RARE} {MEDIUM} {CASE_VARIANTS[0]}\n")
    _write(root / "debug.log", f"{RARE}\n")
    return ignored + 5


def build_tree(root: Path, n_files: int, seed: int) -> Tree:
    """The visible files (a few lines to ~10 KB each, needles planted), then what grep and glob must skip."""
    t0 = time.perf_counter()
    rng = random.Random(seed)
    pool = _line_pool(rng)
    paths, binary_at = _layout(rng, n_files)
    text_at = [i for i in range(n_files) if i not in binary_at]
    planted, expected = _plant(rng, [i for i in text_at if i >= 3], n_files)
    first_binary = min(binary_at)
    total = 0
    made: set[str] = set()
    for index, rel in enumerate(paths):
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        if parent not in made:
            (root / parent).mkdir(parents=True, exist_ok=True)
            made.add(parent)
        if index in binary_at:  # NUL bytes at the start: rg skips the file, needle or not
            body = b"\x89PNG\r\n\x1a\n\x00\x00" + rng.randbytes(rng.randint(2_000, 8_000))
            total += _write(root / rel, body + f" {RARE} ".encode() if index == first_binary else body)
            continue
        count = max(3, min(300, int(rng.lognormvariate(3.3, 0.8))))
        body_lines = rng.choices(pool, k=count)
        for line in planted.get(index, []):
            body_lines.insert(rng.randrange(count), line)
        total += _write(root / rel, "\n".join(body_lines) + "\n")
    ignored = _write_hidden_from_tools(root, rng, pool, n_files)
    return Tree(
        files=n_files,
        text_files=len(text_at),
        binary_files=len(binary_at),
        ignored_files=ignored,
        directories=len(_directories(paths)),
        megabytes=round(total / 1e6, 1),
        build_s=round(time.perf_counter() - t0, 1),
        expected=expected,
    )


# ---- the queries ------------------------------------------------------------------------------------------

Work = Literal["same", "less", "store-only"]


@dataclass(frozen=True)
class GrepCase:
    name: str
    query: str
    regex: bool = False
    case_sensitive: bool = False
    limit: int = 20  # grep's default
    work: Work = "same"  # "less": the tool stops rg at `limit` matches while rg reads everything


@dataclass(frozen=True)
class GlobCase:
    name: str
    pattern: str
    kind: Literal["file", "directory"] | None = None


GREP_CASES = [
    GrepCase("rare literal", RARE),
    GrepCase("case-insensitive literal", CASE_VARIANTS[0].upper()),
    GrepCase("case-sensitive literal", CASE_VARIANTS[0], case_sensitive=True),
    GrepCase("regex (rare)", REGEX_QUERY, regex=True),
    GrepCase("medium literal, limit 1000", MEDIUM, limit=1000),
    GrepCase("common literal, limit 20", COMMON, work="less"),
    GrepCase("common literal, limit 1000", COMMON, limit=1000, work="less"),
    GrepCase("common literal, all (store)", COMMON, limit=10**9, work="store-only"),
]
GLOB_CASES = [
    GlobCase("**/*.py", "**/*.py"),
    GlobCase("*.md (basename)", "*.md"),
    GlobCase("src/**", "src/**"),
    GlobCase("impl kind=directory", "impl", kind="directory"),
]


def grep_argv(case: GrepCase, *, sort: bool) -> list[str]:
    """The argv `sandbox.ripgrep.search` builds for `case` (no glob; the data dir lies outside the tree)."""
    argv = [ripgrep.rg_binary(), "--json", "--hidden", *(["--sort", "path"] if sort else []), "--max-count", "1"]
    argv += [] if case.case_sensitive else ["--ignore-case"]
    argv += [] if case.regex else ["--fixed-strings"]
    return [*argv, "--no-require-git", "--glob", "!.git", "--regexp", case.query, "--", "."]


def files_argv(*, sort: bool) -> list[str]:
    """The argv `sandbox.ripgrep.list_files` builds (the data dir lies outside the tree)."""
    argv = [ripgrep.rg_binary(), "--files", "--hidden", *(["--sort", "path"] if sort else [])]
    return [*argv, "--no-require-git", "--glob", "!.git", "--", "."]


# ---- timing -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    n: int
    min_ms: float
    p50_ms: float
    max_ms: float

    @classmethod
    def of(cls, samples_s: list[float]) -> Stat:
        ms = [s * 1000 for s in samples_s]
        return cls(len(ms), round(min(ms), 1), round(statistics.median(ms), 1), round(max(ms), 1))


SERIES = ("tool", "store", "rg", "rg -j")


@dataclass
class CaseResult:
    kind: Literal["grep", "glob"]
    name: str
    arguments: dict[str, Any]
    work: Work
    stats: dict[str, Stat]  # by series
    hits: dict[str, int]  # by series: grep matches; glob: the tool's matches, and files listed by store/rg
    expected: int | None
    ratio: float | None  # tool p50 / rg p50 (store p50 for a store-only row)
    ratio_parallel: float | None  # the same against rg -j
    ratio_min: float | None  # tool min / rg min: steadier than p50 on a loaded machine
    errors: list[str] = field(default_factory=list)


def run_rg(argv: list[str], cwd: Path) -> bytes:
    return subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False).stdout


Timed = Callable[[], Awaitable[int]]


async def time_series(series: dict[str, Timed], reps: int, label: str) -> tuple[dict[str, Stat], dict[str, int]]:
    """One warm-up call of each series, then `reps` rounds calling every series once, in turn."""
    samples: dict[str, list[float]] = {name: [] for name in series}
    hits: dict[str, int] = {}
    for rep in range(reps + 1):
        for name, call in series.items():
            t0 = time.perf_counter()
            count = await call()
            elapsed = time.perf_counter() - t0
            hits[name] = count
            if rep:
                samples[name].append(elapsed)
    progress(f"  {label}: done")
    return {name: Stat.of(s) for name, s in samples.items()}, hits


def _ratio(stats: dict[str, Stat], ours: str, base: str, *, best: bool = False) -> float | None:
    if ours not in stats or base not in stats:
        return None
    mine, theirs = (stats[ours].min_ms, stats[base].min_ms) if best else (stats[ours].p50_ms, stats[base].p50_ms)
    return round(mine / theirs, 2) if theirs else None


async def bench_grep(
    runtime: Runtime, attachment: Attachment, tree: Path, case: GrepCase, reps: int, *, expected: int | None
) -> CaseResult:
    arguments: dict[str, Any] = {"query": case.query, "limit": case.limit}
    if case.regex:
        arguments["regex"] = True
    if case.case_sensitive:
        arguments["caseSensitive"] = True
    errors: list[str] = []
    data_dir = runtime.environment.data_dir

    async def tool() -> int:
        result = await execute(runtime, attachment, PORTS, "grep", arguments)
        if result.structured is None:
            errors.append(result.text)
            return -1
        return int(result.structured["count"])

    async def store() -> int:
        matches, _ = await ripgrep.search(
            tree, ".", case.query, regex=case.regex, case_sensitive=case.case_sensitive, glob=None, per_file=1,
            limit=case.limit, excluded=[data_dir], confine=None,
        )  # fmt: skip
        return len(matches)

    def cli(sort: bool) -> Timed:
        argv = grep_argv(case, sort=sort)

        async def call() -> int:
            return run_rg(argv, tree).count(b'{"type":"match"')

        return call

    series: dict[str, Timed] = {"store": store, "rg": cli(True), "rg -j": cli(False)}
    if case.work != "store-only":
        series = {"tool": tool, **series}
    stats, hits = await time_series(series, reps, f"grep {case.name}")
    ours = "store" if case.work == "store-only" else "tool"
    return CaseResult(
        kind="grep",
        name=case.name,
        arguments=arguments,
        work=case.work,
        stats=stats,
        hits=hits,
        expected=expected,
        ratio=_ratio(stats, ours, "rg"),
        ratio_parallel=_ratio(stats, ours, "rg -j"),
        ratio_min=_ratio(stats, ours, "rg", best=True),
        errors=sorted(set(errors)),
    )


async def bench_glob(runtime: Runtime, attachment: Attachment, tree: Path, case: GlobCase, reps: int) -> CaseResult:
    arguments: dict[str, Any] = {"pattern": case.pattern}
    if case.kind:
        arguments["kind"] = case.kind
    errors: list[str] = []
    data_dir = runtime.environment.data_dir

    async def tool() -> int:
        result = await execute(runtime, attachment, PORTS, "glob", arguments)
        if result.structured is None:
            errors.append(result.text)
            return -1
        return int(result.structured["count"])

    async def store() -> int:
        files, _ = await ripgrep.list_files(tree, [data_dir], MAX_SCAN, confine=None)
        return len(files)

    def cli(sort: bool) -> Timed:
        argv = files_argv(sort=sort)

        async def call() -> int:
            return run_rg(argv, tree).count(b"\n")

        return call

    series: dict[str, Timed] = {"tool": tool, "store": store, "rg": cli(True), "rg -j": cli(False)}
    stats, hits = await time_series(series, reps, f"glob {case.name}")
    return CaseResult(
        kind="glob",
        name=case.name,
        arguments=arguments,
        work="same",
        stats=stats,
        hits=hits,
        expected=None,
        ratio=_ratio(stats, "tool", "rg"),
        ratio_parallel=_ratio(stats, "tool", "rg -j"),
        ratio_min=_ratio(stats, "tool", "rg", best=True),
        errors=sorted(set(errors)),
    )


# ---- breakdown: where the time beyond rg goes -------------------------------------------------------------


def _best_ms(samples_s: list[float]) -> float:
    """The breakdown reports the best of its runs: a part timed alone is the least disturbed by other load."""
    return round(min(samples_s) * 1000, 2)


async def _repeat_async(call: Callable[[], Awaitable[object]], times: int) -> float:
    samples = []
    for _ in range(times):
        t0 = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - t0)
    return _best_ms(samples)


def _repeat(call: Callable[[], object], times: int) -> float:
    samples = []
    for _ in range(times):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return _best_ms(samples)


def _parse_like_store(lines: list[str], prefilter: bool = False) -> int:
    """The per-line work of `sandbox.ripgrep.search`: json.loads, the type test, and building a match.

    With `prefilter`, lines that are not match events (begin, end, summary) are skipped before json.loads.
    """
    count = 0
    for line in lines:
        if prefilter and not line.startswith('{"type":"match"'):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("type") != "match":
            continue
        data = event["data"]
        text = data["lines"].get("text", "")
        first = data["submatches"][0] if data.get("submatches") else {"start": 0}
        ripgrep.Match(
            path=data["path"].get("text", "").removeprefix("./"),
            line=int(data["line_number"]),
            column=len(text.encode()[: first["start"]].decode(errors="ignore")) + 1,
            text=text.rstrip("\r\n"),
        )
        count += 1
    return count


def _shape_grep(matches: list[ripgrep.Match]) -> int:
    """What the grep handler and the executor do with the store's matches: models, dump, JSON text."""
    hits = [
        GrepHit(path=f"/workspace/{m.path}", line=m.line, column=m.column, preview=_preview(m.text, m.column))
        for m in matches
    ]
    output = GrepOutput(path="/workspace", query=COMMON, count=len(hits), truncated=True, hits=hits)
    return len(json.dumps(output.model_dump(mode="json", by_alias=True), separators=(",", ":"), ensure_ascii=False))


async def _drain(argv: list[str], cwd: Path) -> int:
    """Read rg's stdout through `sandbox.ripgrep._lines` (asyncio, decode, split into lines), only counting lines."""
    count = 0
    async for _ in ripgrep._lines(argv, cwd, None):
        count += 1
    return count


async def _drain_bytes(argv: list[str], cwd: Path) -> int:
    """Read rg's stdout through anyio as raw bytes (no decoding, no line splitting)."""
    size = 0
    process = await anyio.open_process(argv, cwd=cwd, stdin=None, stderr=None)
    async with process:
        assert process.stdout is not None
        async for chunk in process.stdout:
            size += len(chunk)
    return size


def _matcher(pattern: str, entries: list[str]) -> Callable[[], list[str]]:
    """glob's matching step for `pattern` over `entries`."""
    matcher = glob_regex(pattern)
    by_name = "/" not in pattern
    return lambda: [e for e in entries if matcher.match(e.rsplit("/", 1)[-1] if by_name else e)]


async def breakdown(tree: Path, data_dir: Path, times: int) -> dict[str, float | None]:
    """Parts of the tools' cost, each timed alone (best of `times` runs, ms) on the same tree."""
    rg = ripgrep.rg_binary()
    out: dict[str, float | None] = {}
    out["spawn: rg --version via subprocess.run"] = _repeat(lambda: run_rg([rg, "--version"], tree), times)
    out["spawn: rg --version via anyio.run_process"] = await _repeat_async(
        lambda: anyio.run_process([rg, "--version"]), times
    )
    out["grep regex=true: the pre-check (check_pattern, one more rg)"] = await _repeat_async(
        lambda: ripgrep.check_pattern(REGEX_QUERY, confine=None), times
    )

    common = grep_argv(GrepCase("common", COMMON, limit=10**9), sort=True)
    raw = run_rg(common, tree)
    lines = raw.decode(errors="replace").split("\n")
    matches = raw.count(b'{"type":"match"')
    key = f"grep common, every match ({matches} matches, {len(lines)} JSON lines, {len(raw) / 1e6:.1f} MB)"
    out[key] = None  # a heading
    out["  rg CLI, stdout read to completion (subprocess.run)"] = _repeat(lambda: run_rg(common, tree), times)
    out["  rg via anyio, stdout drained as bytes"] = await _repeat_async(lambda: _drain_bytes(common, tree), times)
    out["  rg via ripgrep._lines (decode + split into lines)"] = await _repeat_async(
        lambda: _drain(common, tree), times
    )
    out["  Python only: json.loads every line + Match (as the store)"] = _repeat(
        lambda: _parse_like_store(lines), times
    )
    out["  Python only: the same, json.loads on match lines only"] = _repeat(
        lambda: _parse_like_store(lines, prefilter=True), times
    )

    async def first_1000() -> list[ripgrep.Match]:
        found, _ = await ripgrep.search(
            tree, ".", COMMON, regex=False, case_sensitive=False, glob=None, per_file=1, limit=1000,
            excluded=[data_dir], confine=None,
        )  # fmt: skip
        return found

    hits = await first_1000()
    out[f"grep output shaping: {len(hits)} hits -> GrepOutput, model_dump, json.dumps"] = _repeat(
        lambda: _shape_grep(hits), times
    )

    files = [x.removeprefix("./") for x in run_rg(files_argv(sort=True), tree).decode().splitlines() if x]
    directories = sorted(_directories(files))
    out[f"glob ({len(files)} files, {len(directories)} directories)"] = None  # a heading
    out["  rg --files CLI (subprocess.run)"] = _repeat(lambda: run_rg(files_argv(sort=True), tree), times)
    out["  rg --files via ripgrep._lines"] = await _repeat_async(lambda: _drain(files_argv(sort=True), tree), times)
    out["  _directories(files)"] = _repeat(lambda: _directories(files), times)
    out["  sorted(files + directories) (kind=None)"] = _repeat(lambda: sorted(files + directories), times)
    for case in GLOB_CASES:
        entries = files if case.kind == "file" else directories if case.kind == "directory" else files + directories
        out[f"  match {case.pattern!r} over {len(entries)} entries"] = _repeat(_matcher(case.pattern, entries), times)
    return out


class ReapWarnings(logging.Filter):
    """Counts and hides asyncio's "Unknown child process pid N, will report returncode 255" warnings.

    `sandbox.ripgrep._lines` kills rg in its `finally` even when rg has already exited; Popen.send_signal polls
    first and reaps the child, so asyncio's child watcher then finds no child to wait for and logs this.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Unknown child process pid"):
            self.count += 1
            return False
        return True


# ---- the run ----------------------------------------------------------------------------------------------


async def run_all(
    tree: Path, data_dir: Path, info: Tree, reps: int
) -> tuple[list[CaseResult], dict[str, float | None]]:
    results: list[CaseResult] = []
    async with open_runtime(ServeConfig.build(workspace=tree, data_dir=data_dir)) as runtime:
        attachment = await attach(runtime, None, "bench")
        for gcase in GREP_CASES:
            expected = info.expected.get(gcase.query if gcase.case_sensitive else gcase.query.lower())
            results.append(await bench_grep(runtime, attachment, tree, gcase, reps, expected=expected))
        for fcase in GLOB_CASES:
            results.append(await bench_glob(runtime, attachment, tree, fcase, reps))
        await detach(runtime, attachment)
    progress("  breakdown ...")
    parts = await breakdown(tree, data_dir, max(3, reps))
    return results, parts


WORK_NOTE = {"same": "same", "less": "less: stops at limit", "store-only": "store, all matches"}


def _cell(stat: Stat | None) -> str:
    return f"{stat.p50_ms:>8.1f} {f'({stat.min_ms:.1f})':>9}" if stat else f"{'-':>8} {'':>9}"


def _ratio_cell(ratio: float | None) -> str:
    return f"{ratio:>7.2f}" if ratio is not None else f"{'-':>7}"


def print_report(
    info: Tree, results: list[CaseResult], parts: dict[str, float | None], reps: int, load: str, *, reaped: int
) -> None:
    print(
        f"tree: {info.files} files visible to grep/glob ({info.text_files} text, {info.binary_files} binary; "
        "rg also lists the .gitignore), "
        f"{info.directories} directories, {info.megabytes} MB; {info.ignored_files} more files ignored "
        f"(.gitignore'd {IGNORED_DIR}/, *.log, .git); built in {info.build_s} s"
    )
    print(f"timing: {reps} reps after 1 warm-up, series interleaved; ms as p50 (min); {load}")
    print(
        f"ratio = tool p50 / rg p50 (target <= {TARGET_RATIO:g}); min = tool min / rg min; vs -j = tool p50 / rg -j p50"
    )
    print("rg = the store's own argv (--sort path: one thread); rg -j = the same argv without --sort path\n")
    head = f"{'case':<32} {'work':<20} {'hits tool/store/rg':>18}"
    cols = "".join(f" {name + ' p50 (min)':>18}" for name in SERIES)
    print(head + cols + f" {'ratio':>7} {'min':>7} {'vs -j':>7}")
    print("-" * (len(head) + len(cols) + 24))
    for kind in ("grep", "glob"):
        for r in (x for x in results if x.kind == kind):
            hits = "/".join(str(r.hits[s]) if s in r.hits else "-" for s in ("tool", "store", "rg"))
            line = f"{kind + ' ' + r.name:<32} {WORK_NOTE[r.work]:<20} {hits:>18}"
            line += "".join(f" {_cell(r.stats.get(s))}" for s in SERIES)
            line += f" {_ratio_cell(r.ratio)} {_ratio_cell(r.ratio_min)} {_ratio_cell(r.ratio_parallel)}"
            if r.ratio is not None and r.ratio > TARGET_RATIO and r.work != "less":
                line += "  > target"
            print(line)
            wrong = {s: n for s, n in r.hits.items() if r.expected is not None and n != r.expected}
            if wrong:
                print(f"{'':<32} expected {r.expected} hits; got {wrong}")
            for error in r.errors:
                print(f"{'':<32} tool error: {error[:200]}")
    print("\nglob hits: the tool's matches / files listed by the store / by rg.")
    print("'less' rows: our grep kills rg after limit+1 matches (in path order), rg reads the whole tree.")
    print("A store-only row: the tool caps limit at 1000, so only the store function can collect every match.\n")
    print(
        f"asyncio 'Unknown child process pid' warnings during the run: {reaped} (hidden; sandbox/ripgrep.py _lines "
        "kills rg after it has exited, which reaps it before asyncio's child watcher can)\n"
    )
    print(f"breakdown (ms, best of {max(3, reps)} runs, each part alone):")
    width = max(len(k) for k in parts)
    for key, value in parts.items():
        print(f"  {key}" if value is None else f"  {key:<{width}}  {value:>8.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, help="files in the generated tree (default: 50000; --quick: 5000)")
    parser.add_argument("--reps", type=int, help="timed repetitions after one warm-up (default: 5; --quick: 3)")
    parser.add_argument("--seed", type=int, default=5, help="tree seed (default: 5)")
    parser.add_argument("--quick", action="store_true", help="a 5,000-file smoke run (explicit options win)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    parser.add_argument("--keep", action="store_true", help="keep the generated tree and print where it is")
    args = parser.parse_args(argv)
    args.files = args.files or (5_000 if args.quick else 50_000)
    args.reps = args.reps or (3 if args.quick else 5)
    if args.files < 1_000 or args.reps < 1:
        parser.error("--files must be >= 1000 and --reps >= 1")

    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="managed-tools-bench-files-"))
    try:
        tree, data_dir = tmp / "tree", tmp / "state"
        tree.mkdir()
        progress(f"building a {args.files}-file tree in {tree} ...")
        info = build_tree(tree, args.files, args.seed)
        progress(f"  {info.files} files, {info.megabytes} MB in {info.build_s} s")
        reap = ReapWarnings()
        logging.getLogger("asyncio").addFilter(reap)
        load_before = os.getloadavg()[0]
        results, parts = anyio.run(run_all, tree, data_dir, info, args.reps)
        load_after = os.getloadavg()[0]
    finally:
        if args.keep:
            progress(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    cpus = os.cpu_count() or 1
    load = f"{cpus} CPUs, 1-min load average {load_before:.1f} before, {load_after:.1f} after"
    if max(load_before, load_after) > cpus * 0.5:
        load += " (a loaded machine: expect noise)"
    progress(f"done in {time.perf_counter() - started:.1f} s")

    if args.json:
        document = {
            "files": args.files,
            "reps": args.reps,
            "seed": args.seed,
            "target_ratio": TARGET_RATIO,
            "load": load,
            "tree": asdict(info),
            "argv": {
                "grep": grep_argv(GrepCase("x", "QUERY"), sort=True)[1:],
                "glob": files_argv(sort=True)[1:],
            },
            "results": [asdict(r) for r in results],
            "breakdown": parts,
            "asyncio_unknown_child_warnings": reap.count,
        }
        print(json.dumps(document, indent=2))
    else:
        print_report(info, results, parts, args.reps, load, reaped=reap.count)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
