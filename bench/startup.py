"""Start-up, tools/list bytes and idle memory: managed-tools (`full`, `--preset coding`, `--tool-search`) against
the bare SDK `MCPServer` echo server, and the CLI's `where`, `audit export` and `tools` against
`python -c "import pydantic, sqlite3"`, in one run.

Each repetition starts every server as a stdio subprocess, interleaved (full, coding, search, bare, full, ...), and
speaks raw JSON-RPC lines to them, so no client library's own cost is in the figures:

* start-up: from spawning the process until the answer to the first `tools/list` arrives (after the handshake:
  `initialize`, `notifications/initialized`, `tools/list`); and the CPU time (user + system, /proc) the process
  had used by then, which moves less than wall time when other work shares the cores;
* tools/list bytes: the length of that answer's line, as sent (the whole catalogue, no preset);
* idle RSS: the process's resident memory (VmRSS, /proc) one second after that answer, nothing else asked.

Before the first run each checkout's modules are compiled to bytecode (`compileall`), as installing a package
does: a checkout run with PYTHONDONTWRITEBYTECODE=1 (as on these machines) otherwise compiles its ~240 modules
from source on every start, ~330 ms of CPU the bare server, whose SDK is installed, never pays.

Median and p95 over the repetitions, each server/bare at the median, and coding/full and search/full. Goals
(issues 24 and 41): start-up <= 1.2x bare, `coding` and `--tool-search` faster than `full`, idle RSS <= 1.2x,
tools/list <= 60,000 bytes. Then the CLI rows (bench/cli.py's state and timing, as many rounds as --repeat):
each command's median and p95 against the bare import, goal <= 5x (issue 41 item 5). With `--before DIR` (a
checkout of an earlier commit, e.g. from `git archive <commit> | tar -x -C DIR`) one more server, that checkout's
`full`, runs interleaved with the others, for a before/after table measured under the same load. A benchmark, not
a test: it always exits 0.

    python bench/startup.py [--repeat 7] [--before DIR] [--no-cli] [--json]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import cli  # bench/cli.py, beside this file

REPO_ROOT = Path(__file__).resolve().parent.parent
BARE_SERVER = Path(__file__).resolve().parent / "bare_echo_server.py"
GOALS = {"startup": 1.2, "cpu": 1.2, "rss": 1.2}
# Ours, each as `serve` is given it; `before` (an earlier checkout) runs as `full`.
SERVERS: dict[str, list[str]] = {"full": [], "coding": ["--preset", "coding"], "search": ["--tool-search"]}
CLI_COMMANDS = ("baseline", "where", "audit export", "tools")
MAX_LIST_BYTES = 60_000
HANDSHAKE: list[dict[str, Any]] = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench-startup", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
]


@dataclass(frozen=True)
class Sample:
    server: str
    startup_ms: float
    cpu_ms: float
    list_bytes: int
    tools: int
    rss_kb: int


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


PACKAGE_DIRS = ("managed_tools", "server", "tools", "stores", "sandbox")  # managed_tools/ links to the others


def compiled(checkout: Path) -> None:
    """Write the bytecode of a checkout's modules, as `pip install` does for a package."""
    for name in PACKAGE_DIRS:
        if (checkout / name).is_dir():
            compileall.compile_dir(checkout / name, quiet=2)


def cpu_ms(pid: int) -> float:
    """User + system CPU time of the process so far (/proc/PID/stat fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


@contextmanager
def spawned(command: list[str], cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A stdio server, its stdin closed (how it is told to stop) and its exit awaited on the way out."""
    process = subprocess.Popen(
        command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        yield process
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def answer(process: subprocess.Popen[bytes], request_id: object, server: str) -> tuple[dict[str, Any], bytes]:
    """The server's answer to the request with this id, and its line as sent."""
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"{server} closed its output before answering request {request_id}")
        message: dict[str, Any] = json.loads(line)
        if message.get("id") == request_id:
            return message, line


def one(server: str, command: list[str], idle_seconds: float, cwd: Path = REPO_ROOT) -> Sample:
    started = time.perf_counter()
    with spawned(command, cwd) as process:
        assert process.stdin is not None
        process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in HANDSHAKE))
        process.stdin.flush()
        message, line = answer(process, 2, server)
        startup_ms = (time.perf_counter() - started) * 1000
        used = cpu_ms(process.pid)
        if "result" not in message:
            raise RuntimeError(f"{server}: tools/list failed: {message.get('error')}")
        time.sleep(idle_seconds)
        memory = rss_kb(process.pid)
    tools = len(message["result"]["tools"])
    return Sample(server, round(startup_ms, 1), round(used), len(line.rstrip(b"\n")), tools, memory)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[94] if len(values) > 1 else values[0]


def summary(samples: list[Sample]) -> dict[str, Any]:
    by: dict[str, list[Sample]] = {}
    for s in samples:
        by.setdefault(s.server, []).append(s)
    out: dict[str, Any] = {}
    for server, rows in by.items():
        startups = [r.startup_ms for r in rows]
        cpus = [r.cpu_ms for r in rows]
        rss = [float(r.rss_kb) for r in rows]
        out[server] = {
            "startup_p50_ms": round(statistics.median(startups), 1),
            "startup_p95_ms": round(p95(startups), 1),
            "cpu_p50_ms": round(statistics.median(cpus)),
            "cpu_p95_ms": round(p95(cpus)),
            "rss_p50_kb": round(statistics.median(rss)),
            "rss_p95_kb": round(p95(rss)),
            "list_bytes": rows[-1].list_bytes,
            "tools": rows[-1].tools,
        }
    bare = out["bare"]
    out["against_full"] = {
        server: {
            what: round(out[server][f"{what}_p50_ms"] / out["full"][f"{what}_p50_ms"], 2) for what in ("startup", "cpu")
        }
        for server in ("coding", "search")
        if server in out
    }
    out["ratios"] = {
        server: {
            "startup": round(out[server]["startup_p50_ms"] / bare["startup_p50_ms"], 2),
            "cpu": round(out[server]["cpu_p50_ms"] / bare["cpu_p50_ms"], 2),
            "rss": round(out[server]["rss_p50_kb"] / bare["rss_p50_kb"], 2),
        }
        for server in by
        if server != "bare"
    }
    return out


def print_table(figures: dict[str, Any], repeat: int) -> None:
    print(f"start-up to the first tools/list answer, idle RSS, tools/list bytes ({repeat} interleaved runs)\n")
    print(
        f"{'server':<8} {'start p50 ms':>12} {'p95 ms':>8} {'CPU p50 ms':>10} {'p95 ms':>7} {'RSS p50 MB':>11} "
        f"{'p95 MB':>7} {'list bytes':>11} tools"
    )
    for server in [name for name in ("before", *SERVERS, "bare") if name in figures]:
        f = figures[server]
        print(
            f"{server:<8} {f['startup_p50_ms']:>12.1f} {f['startup_p95_ms']:>8.1f} {f['cpu_p50_ms']:>10} "
            f"{f['cpu_p95_ms']:>7} {f['rss_p50_kb'] / 1024:>11.1f} "
            f"{f['rss_p95_kb'] / 1024:>7.1f} {f['list_bytes']:>11,} {f['tools']:>5}"
        )
    print()
    for server, ratios in figures["ratios"].items():
        for what, goal in GOALS.items():
            verdict = "met" if ratios[what] <= goal else "NOT met"
            print(f"{server + '/bare':<14} {what:<8} {ratios[what]:.2f}x  (goal <= {goal}x: {verdict})")
    for server, ratios in figures["against_full"].items():
        for what, ratio in ratios.items():
            verdict = "met" if ratio < 1 else "NOT met"
            print(f"{server + '/full':<14} {what:<8} {ratio:.2f}x  (goal < 1x: {verdict})")
    size = figures["full"]["list_bytes"]
    verdict = "met" if size <= MAX_LIST_BYTES else "NOT met"
    print(f"tools/list     {size:,} bytes (goal <= {MAX_LIST_BYTES:,}: {verdict})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=7, help="interleaved runs of each server (default: 7)")
    parser.add_argument("--idle", type=float, default=1.0, help="seconds to wait before reading RSS (default: 1)")
    parser.add_argument("--before", type=Path, help="an earlier checkout to run beside this one, as `before`")
    parser.add_argument("--no-cli", action="store_true", help="leave out the CLI rows")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    samples: list[Sample] = []
    for checkout in [REPO_ROOT, *([args.before] if args.before is not None else [])]:
        compiled(checkout)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for n in range(args.repeat):
            workspace = Path(tmp) / f"w{n}"
            workspace.mkdir()
            serve = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
            if args.before is not None:
                state = f"{workspace}.before"
                samples.append(one("before", [*serve, "--data-dir", state], args.idle, args.before.resolve()))
            for name, flags in SERVERS.items():
                samples.append(one(name, [*serve, "--data-dir", f"{workspace}.{name}", *flags], args.idle))
            samples.append(one("bare", [sys.executable, str(BARE_SERVER)], args.idle))
            latest = samples[-(len(SERVERS) + 1 + (args.before is not None)) :]
            timings = ", ".join(f"{s.server} {s.startup_ms} ms" for s in latest)
            print(f"run {n + 1}/{args.repeat}: {timings}", file=sys.stderr)
    figures = summary(samples)
    rows = [] if args.no_cli else cli_rows(args.repeat)
    if args.json:
        samples_out = [asdict(s) for s in samples]
        print(json.dumps({"repeat": args.repeat, "figures": figures, "samples": samples_out, "cli": rows}))
        return 0
    print_table(figures, args.repeat)
    if rows:
        print(f"\nthe CLI ({args.repeat} runs each, interleaved; ratio against {cli.BASELINE}, goal <= 5x)\n")
        cli.print_rows(rows)
    return 0


def cli_rows(rounds: int) -> list[dict[str, Any]]:
    """`where`, `audit export` and `tools` against the bare import, on bench/cli.py's seeded state."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-cli-") as tmp:
        workspace, data_dir = Path(tmp) / "workspace", Path(tmp) / "data"
        workspace.mkdir()
        data_dir.mkdir()
        os.environ["XDG_CONFIG_HOME"] = str(Path(tmp) / "config")  # no person's user config or skills
        anyio.run(cli.seed, data_dir)
        argvs = {name: argv for name, argv in cli.series(workspace, data_dir).items() if name in CLI_COMMANDS}
        return cli.figures(cli.measure(argvs, rounds))


if __name__ == "__main__":
    sys.exit(main())
