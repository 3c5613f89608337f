"""`bash` round trip over stdio: `ls` of a small directory, p50/p95, against `session_get_events` as a floor.

Starts `managed-tools serve` as a subprocess on a temporary workspace holding 20 small files, connects with
`mcp.Client(StdioServerParameters(...))`, makes `--warmup` untimed calls and times `--calls` sequential round
trips per series. `bash ls` costs what any call costs (parse, span events, a short write for the command
record) plus spawning `ls` and recording its end; the second series shows the part that is not the process.
It is a benchmark, not a test: the exit status is 0 whatever the figures are.

    python bench/shell.py [--calls 200] [--warmup 20] [--mode auto|legacy]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

REPO_ROOT = Path(__file__).resolve().parent.parent


async def series(
    params: StdioServerParameters, mode: str, call: tuple[str, dict[str, Any]], *, calls: int, warmup: int
) -> dict[str, float]:
    tool, arguments = call
    async with Client(params, mode=mode) as client:
        for _ in range(warmup):
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content
        samples = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await client.call_tool(tool, arguments)
            samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 2),
        "mean_ms": round(statistics.fmean(samples), 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--mode", choices=("auto", "legacy"), default="auto")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "workspace"
        (workspace / "small").mkdir(parents=True)
        for i in range(20):
            (workspace / "small" / f"file{i:02}.txt").write_text(f"line {i}\n")
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "managed_tools.server",
                "serve",
                "--workspace",
                str(workspace),
                "--data-dir",
                str(Path(tmp) / "state"),
            ],
            cwd=str(REPO_ROOT),
        )
        runs: list[tuple[str, str, dict[str, Any]]] = [
            ("bash ls small", "bash", {"command": "ls", "args": ["small"]}),
            ("session_get_events", "session_get_events", {"limit": 5}),
        ]
        print(f"mode={options.mode} calls={options.calls} warmup={options.warmup}")
        for label, tool, arguments in runs:
            figures = await series(params, options.mode, (tool, arguments), calls=options.calls, warmup=options.warmup)
            print(f"{label:<20} p50 {figures['p50_ms']:7.2f} ms   p95 {figures['p95_ms']:7.2f} ms   "
                  f"mean {figures['mean_ms']:7.2f} ms")  # fmt: skip


if __name__ == "__main__":
    anyio.run(main)
