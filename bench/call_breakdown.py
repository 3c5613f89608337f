"""Where one tool call's time goes, in process: each step timed alone, against the bare SDK echo in the same run.

A real `mcp.Client` calls the managed server over the in-memory transport (no process, no pipe), and the bare
server of bench/bare_echo_server.py answers `echo` the same way; calls alternate between the two. For the managed
calls, wrappers time the steps the executor takes (parsing, the handler, the call's record and its SQL) and the
client's check of the result against the tool's output schema. What is left of a call's time is the SDK's
dispatch on both sides and the glue around the executor. Medians in microseconds, and each step's share.

It is a benchmark, not a test: it prints the figures and exits 0 whatever they are.

    python bench/call_breakdown.py [--calls 1000] [--tool memory_read --arguments '{"target": "session_state"}']
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.session import ClientSession

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bare_echo_server

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.db.sqlite import SqliteDatabase
from managed_tools.tools.framework.calls import executor

Steps = dict[str, list[float]]
ORDER = [
    "parse the arguments",
    "the handler (in its snapshot)",
    "the call's record",
    "  of which its SQL",
    "the client's check of the result",
]


@contextmanager
def _timing(label: str, steps: Steps) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        steps.setdefault(label, []).append(time.perf_counter() - started)


def timed(owner: Any, name: str, label: str, steps: Steps) -> None:
    """Replace `owner.name` by a wrapper adding each call's duration to `steps[label]`."""
    original: Callable[..., Any] = getattr(owner, name)

    async def waited(*args: Any, **kwargs: Any) -> Any:
        with _timing(label, steps):
            return await original(*args, **kwargs)

    def ran(*args: Any, **kwargs: Any) -> Any:
        with _timing(label, steps):
            return original(*args, **kwargs)

    setattr(owner, name, waited if inspect.iscoroutinefunction(original) else ran)


async def run(tool: str, arguments: dict[str, Any], calls: int) -> tuple[float, float, dict[str, float]]:
    steps: Steps = {}
    timed(executor, "parse_call", "parse the arguments", steps)
    timed(executor, "_call_handler", "the handler (in its snapshot)", steps)
    timed(executor, "write_completed", "the call's record", steps)
    timed(SqliteDatabase, "_run", "  of which its SQL", steps)
    timed(ClientSession, "validate_tool_result", "the client's check of the result", steps)
    managed_times: list[float] = []
    bare_times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-breakdown-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        (workspace / "a.txt").write_text("a line of text\n" * 40)
        config = ServeConfig.build(workspace=workspace, data_dir=Path(tmp) / "state", database=None)
        async with (
            open_runtime(config) as runtime,
            Client(build_server(runtime, transport="memory")) as managed,
            Client(bare_echo_server.server) as bare,
        ):
            for n in range(calls + 50):
                if n == 50:  # warm-up done
                    steps.clear()
                started = time.perf_counter()
                await managed.call_tool(tool, arguments)
                middle = time.perf_counter()
                await bare.call_tool("echo", {"text": "hi"})
                if n >= 50:
                    managed_times.append(middle - started)
                    bare_times.append(time.perf_counter() - middle)
    # In ORDER: the record's SQL ends before the record does, but is listed under it.
    medians = {label: statistics.median(steps[label]) * 1e6 for label in sorted(steps, key=ORDER.index)}
    return statistics.median(managed_times) * 1e6, statistics.median(bare_times) * 1e6, medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1000, help="timed calls of each server (default: 1000)")
    parser.add_argument("--tool", default="memory_read", help="the managed tool to call (default: memory_read)")
    parser.add_argument(
        "--arguments", default='{"target": "session_state"}', help="its arguments as JSON (default: session_state)"
    )
    args = parser.parse_args(argv)
    total, bare, medians = anyio.run(run, args.tool, json.loads(args.arguments), args.calls)
    print(f"{args.tool}, in process, {args.calls} calls (medians; the steps are timed alone)")
    print(f"{'a whole call':<36} {total:8.0f} us")
    for label, value in medians.items():
        print(f"{label:<36} {value:8.0f} us  {value / total:5.0%}")
    steps = sum(value for label, value in medians.items() if not label.startswith(" "))
    print(f"{'the rest (SDK dispatch, our glue)':<36} {total - steps:8.0f} us  {(total - steps) / total:5.0%}")
    print(f"{'bare echo, the same run':<36} {bare:8.0f} us  (a managed call is {total / bare:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
