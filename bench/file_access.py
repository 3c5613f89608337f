"""In-process benchmark of descriptor-based file access (issue 10 item 4): what opening beneath the mount root costs
a `read`, before/after in one run.

On a 4 KiB file three directories deep in a fresh workspace it times, interleaved in every repetition:

* `string open`: the guard's resolve, then `open(host path)` and a bounded read: what `read` did before;
* `openat2`: the guard's resolve, then `stores.files.read_limited` (root descriptor, openat2 with RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS, O_NONBLOCK, fstat, clearing O_NONBLOCK): what `read` does now;
* `walk`: the same through the portable O_NOFOLLOW component walk (what runs where openat2 does not);
* `resolve`: the guard's resolve alone (in all three above);
* `tool`: the whole `read` call through `tools.framework.executor.execute`, for scale.

It is a benchmark, not a test: it prints figures and exits 0 whatever they are.

    python bench/file_access.py [--calls 3000] [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio
from noports import PORTS

from managed_tools.sandbox import files, fsaccess
from managed_tools.sandbox.paths import PathGuard
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.connection.attach import attach, detach
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.framework.calls.executor import execute

PATH = "src/a/b/file.txt"
LIMIT = 48_004  # what read asks for with the default maxChars


def string_open(guard: PathGuard) -> int:
    resolved = guard.resolve(PATH, "read")
    with open(resolved.host, "rb") as handle:
        return len(handle.read(LIMIT + 1))


def openat2(guard: PathGuard) -> int:
    data, _ = files.read_limited(guard.resolve(PATH, "read"), LIMIT)
    return len(data)


def walk(guard: PathGuard) -> int:
    """open_read's steps with the walk instead of openat2."""
    resolved = guard.resolve(PATH, "read")
    fd = fsaccess.open_beneath(resolved.root, resolved.real, os.O_RDONLY | os.O_NONBLOCK, walk=True)
    assert stat.S_ISREG(os.fstat(fd).st_mode)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        return len(handle.read(LIMIT + 1))


def resolve_only(guard: PathGuard) -> int:
    return len(guard.resolve(PATH, "read").real)


def per_call_us(function: Callable[[PathGuard], int], guard: PathGuard, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        function(guard)
    return (time.perf_counter() - started) / calls * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp, "workspace")
        (workspace / "src/a/b").mkdir(parents=True)
        (workspace / PATH).write_text("".join(f"line {n:04d} of the benchmark file\n" for n in range(128)))
        async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=None)) as runtime:
            attachment = await attach(runtime, None, "bench")
            series: dict[str, list[float]] = {"resolve": [], "string open": [], "openat2": [], "walk": [], "tool": []}
            for rep in range(args.reps):
                print(f"rep {rep + 1}/{args.reps}", file=sys.stderr, flush=True)
                timed = (("resolve", resolve_only), ("string open", string_open), ("openat2", openat2), ("walk", walk))
                for name, function in timed:
                    series[name].append(per_call_us(function, runtime.guard, args.calls))
                started = time.perf_counter()
                for _ in range(args.calls // 10):
                    result = await execute(runtime, attachment, PORTS, "read", {"path": PATH})
                    assert result.status == "success", result.text
                series["tool"].append((time.perf_counter() - started) / (args.calls // 10) * 1e6)
            await detach(runtime, attachment)
    medians = {name: statistics.median(values) for name, values in series.items()}
    figures = {
        "openat2_available": fsaccess.OPENAT2.available,
        "median_us_per_call": {name: round(value, 2) for name, value in medians.items()},
        "openat2_over_string": round(medians["openat2"] / medians["string open"], 3),
        "walk_over_string": round(medians["walk"] / medians["string open"], 3),
        "added_us": round(medians["openat2"] - medians["string open"], 2),
        "added_share_of_tool_call": round((medians["openat2"] - medians["string open"]) / medians["tool"], 4),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"openat2 available: {figures['openat2_available']}; median of {args.reps} reps, µs per call")
    for name, value in medians.items():
        print(f"  {name:<12} {value:9.2f}")
    print(
        f"openat2/string {figures['openat2_over_string']}, walk/string {figures['walk_over_string']}; "
        f"added {figures['added_us']} µs = {figures['added_share_of_tool_call']:.2%} of a whole read call"
    )


if __name__ == "__main__":
    anyio.run(main)
