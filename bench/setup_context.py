"""The setup contract and the context budget: what recording the setup costs at attach, and what
`session_describe_context` costs as a wake fills up.

1. attach: `server.attach.attach` (records the contract, opens the wake) against a baseline that opens the same
   wake without the contract, interleaved round by round; p50/p95 and the ratio.
2. describe: `session_describe_context` through `tools.framework.executor.execute` on a wake holding `--results` tool
   results (each call's `span.completed` carries its size), p50/p95.

It is a benchmark, not a test: it prints figures and exits 0 whatever they are.

    python bench/setup_context.py [--attaches 200] [--results 1000,10000] [--calls 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from noports import PORTS

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.connection.attach import attach
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import events, sessions
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Attachment, Runtime


def quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": statistics.median(ordered) * 1000, "p95": ordered[int(len(ordered) * 0.95)] * 1000}


async def baseline_attach(runtime: Runtime) -> None:
    """What attach did before the contract: a session, a wake, its span event."""
    async with runtime.db.write() as tx:
        record = await sessions.create_session(tx, runtime.environment.agent_id)
        wake = await sessions.open_wake(tx, record.id, transport="bench", setup_fingerprint=setup_fingerprint(runtime))
        await events.append_event(tx, record.id, wake.id, "span.started", {"spanId": wake.id, "spanKind": "wake"})


async def bench_attach(runtime: Runtime, rounds: int) -> dict[str, Any]:
    ours: list[float] = []
    base: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        await attach(runtime, None, "bench")
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        await baseline_attach(runtime)
        base.append(time.perf_counter() - started)
    a, b = quantiles(ours), quantiles(base)
    return {"attach": a, "baseline": b, "ratio_p50": a["p50"] / b["p50"], "ratio_p95": a["p95"] / b["p95"]}


async def fill(runtime: Runtime, attachment: Attachment, count: int) -> None:
    async with runtime.db.write() as tx:
        for i in range(count):
            payload = {"spanId": str(i), "spanKind": "tool", "toolName": "read", "result": "success",
                       "resultChars": (i * 7919) % 50_000}  # fmt: skip
            await events.append_event(tx, attachment.session_id, attachment.wake_id, "span.completed", payload)


async def bench_describe(runtime: Runtime, results: int, calls: int) -> dict[str, float]:
    attachment = await attach(runtime, None, "bench")
    await fill(runtime, attachment, results)
    samples: list[float] = []
    for _ in range(calls + 3):
        started = time.perf_counter()
        result = await execute(runtime, attachment, PORTS, "session_describe_context", {})
        samples.append(time.perf_counter() - started)
        assert not result.is_error, result.text
    return quantiles(samples[3:])


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        workspace = Path(root) / "workspace"
        workspace.mkdir()
        config = ServeConfig.build(workspace=workspace, data_dir=Path(root) / "data")
        async with open_runtime(config) as runtime:
            started = time.perf_counter()
            setup_fingerprint(runtime)
            report: dict[str, Any] = {"contract_first_ms": (time.perf_counter() - started) * 1000}
            report["attach"] = await bench_attach(runtime, args.attaches)
            report["describe"] = {
                str(n): await bench_describe(runtime, n, args.calls) for n in map(int, args.results.split(","))
            }
    return report


def show(report: dict[str, Any]) -> None:
    print(f"setup contract, first build after start-up: {report['contract_first_ms']:.1f} ms")
    a = report["attach"]
    print(
        f"attach      p50 {a['attach']['p50']:.2f} ms  p95 {a['attach']['p95']:.2f} ms   "
        f"baseline p50 {a['baseline']['p50']:.2f} ms  p95 {a['baseline']['p95']:.2f} ms   "
        f"ratio p50 {a['ratio_p50']:.2f}  p95 {a['ratio_p95']:.2f}"
    )
    for n, q in report["describe"].items():
        print(f"session_describe_context, {int(n):>6} results in the wake: p50 {q['p50']:.2f}  p95 {q['p95']:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attaches", type=int, default=200)
    parser.add_argument("--results", default="1000,10000")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    figures = anyio.run(main, options)
    print(json.dumps(figures, indent=2)) if options.json else show(figures)
