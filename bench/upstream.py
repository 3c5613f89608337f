"""What our gate costs an upstream MCP server's tool call (issue 15).

The same upstream (tests/support/upstream_server.py, a Python SDK server over stdio) is called twice: directly by
`mcp.Client` (the baseline), and through our server as `probe__<tool>`, where each call is validated, checked
against the policy, recorded as span events, bounded, and an image is stored as a session attachment. Both
series run in this process one after the other; the ratio is gated over direct at p50 and p95.

    python bench/upstream.py                 # 200 calls of echo and of image, after 20 warm-up calls
    python bench/upstream.py --calls 500 --warmup 50

Numbers only: it always exits 0 and is not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime

TESTS = Path(__file__).resolve().parent.parent / "tests"
UPSTREAM = TESTS / "support" / "upstream_server.py"
CALLS: dict[str, dict[str, Any]] = {"echo": {"text": "hello"}, "image": {}}

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


async def timed(call: Call, tool: str, warmup: int, calls: int) -> list[float]:
    for _ in range(warmup):
        await call(tool, CALLS[tool])
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        result = await call(tool, CALLS[tool])
        times.append((time.perf_counter() - start) * 1000)
        assert not result.is_error, result.content
    return times


def p95(times: list[float]) -> float:
    return sorted(times)[max(0, int(len(times) * 0.95) - 1)]


async def main(calls: int, warmup: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workspace, data = Path(tmp) / "workspace", Path(tmp) / "data"
        workspace.mkdir()
        data.mkdir()
        upstream = {"command": sys.executable, "args": [str(UPSTREAM)], "readPaths": [sys.prefix, str(TESTS)]}
        (data / "config.json").write_text(json.dumps({"mcpServers": {"probe": upstream}}), encoding="utf-8")
        series: dict[str, dict[str, list[float]]] = {}
        direct = StdioServerParameters(command=sys.executable, args=[str(UPSTREAM)])
        async with Client(direct, mode="legacy") as client:
            series["direct"] = {tool: await timed(client.call_tool, tool, warmup, calls) for tool in CALLS}
        config = ServeConfig.build(workspace=workspace, data_dir=data)
        async with open_runtime(config) as rt, Client(build_server(rt, transport="memory"), mode="legacy") as gate:

            async def gated(tool: str, arguments: dict[str, Any]) -> Any:
                return await gate.call_tool(f"probe__{tool}", arguments)

            series["gated"] = {tool: await timed(gated, tool, warmup, calls) for tool in CALLS}
    print(f"{'tool':<8}{'series':<8}{'p50 ms':>9}{'p95 ms':>9}{'ratio p50':>11}{'ratio p95':>11}")
    for tool in CALLS:
        base = series["direct"][tool]
        for name, found in series.items():
            times = found[tool]
            ratio = statistics.median(times) / statistics.median(base), p95(times) / p95(base)
            row = f"{tool:<8}{name:<8}{statistics.median(times):>9.2f}{p95(times):>9.2f}"
            print(row + (f"{ratio[0]:>11.2f}{ratio[1]:>11.2f}" if name != "direct" else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    anyio.run(main, args.calls, args.warmup)
