"""What the full sandbox costs per spawn against Landlock alone: p50/p95 and their ratio, measured in one run.

One runtime (the default: every layer this system has), its read-only hand running `ls small` in a temporary
workspace through `tools.shell.runner.start_process`, in four series interleaved round robin so drift and noise hit
all alike:

* `landlock`: the launcher with the ruleset and the rlimits, nothing around it (what MANAGED_TOOLS_CONFINEMENT=
  landlock-only runs);
* `landlock+cgroup`: also a cgroup made, joined and removed per spawn;
* `landlock+bwrap`: also bubblewrap's mount view, PID and network namespaces;
* `full`: the read-only hand's domain as served: every layer.

The goal (issue 23): the full sandbox adds at most 5 ms p50 per command. A benchmark, not a test: the exit status
is 0 whatever the figures are.

    PYTHONPATH=$PWD python bench/sandbox_spawn.py [--calls 200] [--warmup 20] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import anyio
from confine import compare, interleaved, spawn

from managed_tools.sandbox import layers
from managed_tools.server.config import ServeConfig
from managed_tools.server.runtime import open_runtime


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
        print(f"  {name:<16} p50 {f['p50_ms']:7.3f} ms   p95 {f['p95_ms']:7.3f} ms   mean {f['mean_ms']:7.3f} ms")
    print("\nadded:")
    for other in ("landlock+cgroup", "landlock+bwrap", "full"):
        print(compare(results, "landlock", other))


if __name__ == "__main__":
    anyio.run(main)
