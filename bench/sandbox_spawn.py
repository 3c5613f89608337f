"""What the full sandbox costs per spawn against Landlock alone: p50/p95 and their ratio, measured in one run.

One runtime (the default: every layer this system has), its read-only hand running `ls small` in a temporary
workspace through `tools.shell.runner.start_process`, in four series interleaved round robin so drift and noise hit
all alike:

* `landlock`: the launcher with the ruleset and the rlimits, nothing around it (what MANAGED_TOOLS_CONFINEMENT=
  landlock-only runs);
* `landlock+cgroup`: also a cgroup made, joined and removed per spawn;
* `landlock+bwrap`: also bubblewrap's mount view, PID and network namespaces;
* `full`: the read-only hand's domain as served: every layer.

Each spawn is measured twice: wall time, and CPU time (the server's own plus its children's, from getrusage), which
a loaded machine does not inflate: on a busy shared machine the wall time of a spawn that takes three processes
(bwrap, its PID 1, the program) is mostly waiting for a core. The goal (issue 23): the full sandbox adds at most
5 ms p50 per command. A benchmark, not a test: the exit status is 0 whatever the figures are.

    PYTHONPATH=$PWD python bench/sandbox_spawn.py [--calls 200] [--warmup 20] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from confine import compare, figures, spawn

from managed_tools.sandbox import layers
from managed_tools.server.config import ServeConfig
from managed_tools.server.runtime import open_runtime


def cpu_ms() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime) * 1000


async def interleaved(
    series: dict[str, Callable[[], Awaitable[None]]], calls: int, warmup: int
) -> dict[str, dict[str, float]]:
    """Round robin over `series`: wall and CPU figures of each."""
    wall: dict[str, list[float]] = {name: [] for name in series}
    cpu: dict[str, list[float]] = {name: [] for name in series}
    for i in range(warmup + calls):
        for name, run in series.items():
            c0, t0 = cpu_ms(), time.perf_counter()
            await run()
            if i >= warmup:
                wall[name].append((time.perf_counter() - t0) * 1000)
                cpu[name].append(cpu_ms() - c0)
    out = {name: figures(values) for name, values in wall.items()}
    out.update({f"{name} (cpu)": figures(values) for name, values in cpu.items()})
    return out


async def measure(tmp: Path, calls: int, warmup: int) -> tuple[str, dict[str, dict[str, float]]]:
    workspace = tmp / "workspace"
    (workspace / "small").mkdir(parents=True)
    for i in range(20):
        (workspace / "small" / f"file{i:02}.txt").write_text(f"line {i}\n")
    config = ServeConfig.build(workspace=workspace, data_dir=tmp / "data")
    async with open_runtime(config) as rt:
        full = rt.confinement.read_only
        summary = layers.summary(layers.describe(rt.confinement))
        if full is None or full.spawn != "launcher":
            return summary, {}
        series = {
            "landlock": spawn(workspace, dataclasses.replace(full, view=(), cgroups=None)),
            "landlock+cgroup": spawn(workspace, dataclasses.replace(full, view=())),
            "landlock+bwrap": spawn(workspace, dataclasses.replace(full, cgroups=None)),
            "full": spawn(workspace, full),
        }
        return summary, await interleaved(series, calls, warmup)


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        summary, results = await measure(Path(tmp), options.calls, options.warmup)
    if not results:
        print(f"no launcher or no Landlock here: nothing to compare ({summary})", file=sys.stderr)
        return
    if options.json:
        print(json.dumps({"layers": summary, "calls": options.calls, "spawn": results}, indent=2))
        return
    print(f"{summary}\n{options.calls} spawns per series after {options.warmup} warm-up, interleaved\n")
    for name, f in results.items():
        print(f"  {name:<22} p50 {f['p50_ms']:7.3f} ms   p95 {f['p95_ms']:7.3f} ms   mean {f['mean_ms']:7.3f} ms")
    print("\nadded (wall, then CPU):")
    for other in ("landlock+cgroup", "landlock+bwrap", "full"):
        print(compare(results, "landlock", other))
    for other in ("landlock+cgroup", "landlock+bwrap", "full"):
        print(compare(results, "landlock (cpu)", f"{other} (cpu)"))


if __name__ == "__main__":
    anyio.run(main)
