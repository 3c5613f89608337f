"""What kernel confinement costs per `bash` call: p50/p95 with and without Landlock, measured in one run, interleaved.

In-process (no transport, no client; no-op ports, see noports.py), on a temporary workspace holding 20 small files
with the data dir outside it. Two levels, each a round robin over its series so drift and noise hit all alike:

* `tool`: `bash ls small` through `tools.executor.execute` (parse, span events, the command record, the spawn),
  on a runtime with Landlock and on one forced to argv-only (MANAGED_TOOLS_CONFINEMENT) in the same process;
* `spawn`: `tools.shell_runner.start_process` alone running `ls small`, with no preexec_fn (CPython's vfork
  path), a no-op preexec_fn (the fork path a preexec_fn forces) and the Landlock preexec_fn; this splits the added
  cost into "a preexec_fn at all" and "the two syscalls".

It is a benchmark, not a test: the exit status is 0 whatever the figures are.

    PYTHONPATH=$PWD python bench/confine.py [--calls 300] [--warmup 30] [--json]
"""

from __future__ import annotations

import argparse
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

from server.attach import attach
from server.config import ServeConfig
from server.runtime import open_runtime
from stores.confine import FORCE_ENV, PreExec
from stores.ids import utc_now
from tools.context import Attachment, Runtime
from tools.executor import execute
from tools.shell_runner import SAFE_PATH, Job, Output, start_process

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


def spawn(workspace: Path, confine: PreExec | None) -> Callable[[], Awaitable[None]]:
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


def no_op() -> None:
    return None


def compare(out: dict[str, dict[str, float]], base: str, other: str) -> str:
    a, b = out[base], out[other]
    return (
        f"  {other} vs {base}: p50 x{b['p50_ms'] / a['p50_ms']:.3f} ({b['p50_ms'] - a['p50_ms']:+.3f} ms), "
        f"p95 x{b['p95_ms'] / a['p95_ms']:.3f} ({b['p95_ms'] - a['p95_ms']:+.3f} ms)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "workspace"
        (workspace / "small").mkdir(parents=True)
        for i in range(20):
            (workspace / "small" / f"file{i:02}.txt").write_text(f"line {i}\n")
        config = ServeConfig.build(workspace=workspace, data_dir=Path(tmp) / "data")
        os.environ.pop(FORCE_ENV, None)
        async with open_runtime(config) as confined:
            os.environ[FORCE_ENV] = "argv-only"
            async with open_runtime(config) as plain:
                del os.environ[FORCE_ENV]
                if confined.confinement.read_only is None:
                    print("this kernel offers no Landlock: nothing to compare", file=sys.stderr)
                    return
                results = {
                    "tool": await interleaved(
                        {
                            "argv-only": tool_call(plain, await attach(plain, None, "bench")),
                            "landlock": tool_call(confined, await attach(confined, None, "bench")),
                        },
                        options.calls,
                        options.warmup,
                    ),
                    "spawn": await interleaved(
                        {
                            "no preexec_fn": spawn(workspace, None),
                            "no-op preexec_fn": spawn(workspace, no_op),
                            "landlock preexec_fn": spawn(workspace, confined.confinement.read_only),
                        },
                        options.calls,
                        options.warmup,
                    ),
                }
    meta = {"landlock_abi": confined.confinement.abi, "calls": options.calls, "warmup": options.warmup}
    if options.json:
        print(json.dumps({**meta, **results}, indent=2))
        return
    print(f"Landlock ABI {meta['landlock_abi']}, {options.calls} calls per series after {options.warmup} warm-up, "
          "interleaved")  # fmt: skip
    for level, out in results.items():
        print(f"\n{level}:")
        for name, f in out.items():
            print(f"  {name:<22} p50 {f['p50_ms']:7.3f} ms   p95 {f['p95_ms']:7.3f} ms   mean {f['mean_ms']:7.3f} ms")
    print("\nadded by confinement:")
    print(compare(results["tool"], "argv-only", "landlock"))
    print(compare(results["spawn"], "no preexec_fn", "no-op preexec_fn"))
    print(compare(results["spawn"], "no-op preexec_fn", "landlock preexec_fn"))
    print(compare(results["spawn"], "no preexec_fn", "landlock preexec_fn"))


if __name__ == "__main__":
    anyio.run(main)
