"""What kernel confinement costs per `bash` call: p50/p95 with and without Landlock, measured in one run, interleaved.

In-process (no transport, no client; no-op ports, see noports.py), on a temporary workspace holding 20 small files
with the data dir outside it. Two levels, each a round robin over its series so drift and noise hit all alike:

* `tool`: `bash ls small` through `tools.framework.executor.execute` (parse, span events, the command record, the
  spawn) on three runtimes in the same process: argv-only (MANAGED_TOOLS_CONFINEMENT=argv-only), Landlock entered
  through the compiled launcher (the default), and Landlock entered through a preexec_fn (MANAGED_TOOLS_CONFINEMENT=
  preexec, the fallback where no C compiler is found);
* `spawn`: `tools.shell.runner.start_process` alone running `ls small`: unconfined (CPython's vfork path), the
  launcher with the read-only hand's layers, and the Landlock preexec_fn. (What the outer layers, bubblewrap and
  the cgroup, add to a spawn is bench/sandbox_spawn.py's question.)

It is a benchmark, not a test: the exit status is 0 whatever the figures are.

    PYTHONPATH=$PWD python bench/confine.py [--calls 300] [--warmup 30] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from noports import PORTS

from managed_tools.sandbox.confine import FORCE_ENV
from managed_tools.sandbox.spawn import Domain
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.connection.attach import attach
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.ids import utc_now
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Attachment, Runtime
from managed_tools.tools.shell.runner import SAFE_PATH, Job, Output, start_process

Series = dict[str, Callable[[], Awaitable[None]]]


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


async def interleaved(series: Series, calls: int, warmup: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[float]] = {name: [] for name in series}
    for i in range(warmup + calls):
        for name, run in series.items():
            t0 = time.perf_counter()
            await run()
            if i >= warmup:
                samples[name].append((time.perf_counter() - t0) * 1000)
    return {name: figures(values) for name, values in samples.items()}


def tool_call(runtime: Runtime, attachment: Attachment) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        result = await execute(runtime, attachment, PORTS, "bash", {"command": "ls", "args": ["small"]})
        assert result.status == "success", result.text

    return run


def spawn(workspace: Path, confine: Domain | None) -> Callable[[], Awaitable[None]]:
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8"}
    ls = "/usr/bin/ls" if os.path.exists("/usr/bin/ls") else "/bin/ls"

    async def on_done(_: Job) -> None:
        return None

    async def run() -> None:
        job = Job("0" * 16, "bench", "bash", "ls", ["small"], "/workspace", utc_now(), Output(4000), Output(4000))
        await start_process(job, [ls, "small"], cwd=str(workspace), env=env, limit_s=10, on_done=on_done,
                            confine=confine)  # fmt: skip
        await job.recorded.wait()
        assert job.exit_code == 0, job.stderr.text()

    return run


def table(results: dict[str, dict[str, dict[str, float]]]) -> None:
    """Each level's series, one line each: p50, p95 and mean."""
    for level, out in results.items():
        print(f"\n{level}:")
        for name, f in out.items():
            print(f"  {name:<22} p50 {f['p50_ms']:7.3f} ms   p95 {f['p95_ms']:7.3f} ms   mean {f['mean_ms']:7.3f} ms")


def compare(out: dict[str, dict[str, float]], base: str, other: str) -> str:
    a, b = out[base], out[other]
    return (
        f"  {other} vs {base}: p50 x{b['p50_ms'] / a['p50_ms']:.3f} ({b['p50_ms'] - a['p50_ms']:+.3f} ms), "
        f"p95 x{b['p95_ms'] / a['p95_ms']:.3f} ({b['p95_ms'] - a['p95_ms']:+.3f} ms)"
    )


async def measure(tmp: Path, calls: int, warmup: int) -> tuple[int, dict[str, dict[str, dict[str, float]]]]:
    workspace = tmp / "workspace"
    (workspace / "small").mkdir(parents=True)
    for i in range(20):
        (workspace / "small" / f"file{i:02}.txt").write_text(f"line {i}\n")
    config = ServeConfig.build(workspace=workspace, data_dir=tmp / "data")
    async with contextlib.AsyncExitStack() as stack:
        runtimes: dict[str, Runtime] = {}
        for name, force in (("argv-only", "argv-only"), ("launcher", None), ("preexec", "preexec")):
            if force:
                os.environ[FORCE_ENV] = force
            runtimes[name] = await stack.enter_async_context(open_runtime(config))
            os.environ.pop(FORCE_ENV, None)
        launched, forked = runtimes["launcher"].confinement, runtimes["preexec"].confinement
        if launched.read_only is None or forked.read_only is None:
            return 0, {}
        if launched.spawn != "launcher":
            print(f"no launcher ({launched.spawn_reason}): that series is the preexec_fn path", file=sys.stderr)
        tool = {name: tool_call(rt, await attach(rt, None, "bench")) for name, rt in runtimes.items()}
        spawns = {
            "unconfined": spawn(workspace, None),
            "launcher": spawn(workspace, launched.read_only),
            "landlock preexec_fn": spawn(workspace, forked.read_only),
        }
        return launched.abi, {
            "tool": await interleaved(tool, calls, warmup),
            "spawn": await interleaved(spawns, calls, warmup),
        }


def options(doc: str | None, calls: int, warmup: int) -> argparse.Namespace:
    """`--calls`, `--warmup` and `--json`, as the interleaved benchmarks take them."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=calls)
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


async def main() -> None:
    opts = options(__doc__, 300, 30)
    with tempfile.TemporaryDirectory() as tmp:
        abi, results = await measure(Path(tmp), opts.calls, opts.warmup)
    if not results:
        print("this kernel offers no Landlock: nothing to compare", file=sys.stderr)
        return
    meta = {"landlock_abi": abi, "calls": opts.calls, "warmup": opts.warmup}
    if opts.json:
        print(json.dumps({**meta, **results}, indent=2))
        return
    print(f"Landlock ABI {abi}, {opts.calls} calls per series after {opts.warmup} warm-up, interleaved")
    table(results)
    print("\nadded by confinement:")
    print(compare(results["tool"], "argv-only", "launcher"))
    print(compare(results["tool"], "argv-only", "preexec"))
    print(compare(results["spawn"], "unconfined", "launcher"))
    print(compare(results["spawn"], "unconfined", "landlock preexec_fn"))


if __name__ == "__main__":
    anyio.run(main)
