"""Compact results: how many tokens the compact text form saves on list-shaped results (issue 29 part 2).

One fresh state is filled through a real in-process client (sessions, calls, learnings, files), then each
list-shaped tool is called at several sizes. For every result the bench takes the JSON text the server sends by
default (the baseline, from this same run) and the compact text of the same structuredContent
(tools/framework/wire/compact.py), and estimates tokens as characters / 4. It prints each result's figures, then the
median and p95 of the compact/JSON ratio. Always exits 0.

    python bench/compact.py            # about 10 s
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.framework.wire.compact import compact_text

CALLS: list[tuple[str, dict[str, Any]]] = [
    *(("session_list", {"limit": n}) for n in (5, 20, 50)),
    *(("session_get_events", {"limit": n}) for n in (10, 50, 200)),
    *(("learning_list", {"limit": n}) for n in (5, 20)),
    *(("memory_search", {"query": "lesson release", "limit": n}) for n in (8, 30)),
    *(("session_search_context", {"query": "lesson", "limit": n}) for n in (8, 30)),
    *(("glob", {"pattern": "**/*.py", "limit": n}) for n in (10, 100, 400)),
]


def tokens(chars: int) -> float:
    return chars / 4


async def fill(config: ServeConfig, sessions: int) -> None:
    async with open_runtime(config) as runtime:
        for index in range(sessions):
            async with Client(build_server(runtime, transport="memory")) as client:
                for step in range(6):
                    lesson = {"kind": "lesson", "title": f"Release lesson {index}.{step}", "detail": "Run the tests."}
                    await client.call_tool("learning_record", lesson)
                await client.call_tool("memory_write", {"target": "session_state", "content": f"progress {index}"})


async def measure(config: ServeConfig) -> list[tuple[str, int, int]]:
    """(call, JSON characters, compact characters) for each call."""
    found = []
    async with open_runtime(config) as runtime, Client(build_server(runtime, transport="memory")) as client:
        for name, arguments in CALLS:
            result = await client.call_tool(name, arguments)
            if result.is_error or result.structured_content is None:
                print(f"{name} failed: {result.content}", file=sys.stderr)
                continue
            baseline = result.content[0].text  # type: ignore[union-attr]
            compact = compact_text(result.structured_content) or baseline
            found.append((f"{name} {arguments.get('limit')}", len(baseline), len(compact)))
    return found


async def run(sessions: int, files: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "workspace"
        for index in range(files):
            path = workspace / f"pkg{index % 12}" / f"module_{index}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x = 1\n")
        config = ServeConfig.build(workspace=workspace, data_dir=Path(tmp) / "data", notify=lambda _: None)
        await fill(config, sessions)
        rows = await measure(config)
    print(f"{'result':<28} {'JSON tokens':>12} {'compact':>10} {'saved':>7}")
    for label, json_chars, compact_chars in rows:
        saved = 1 - compact_chars / json_chars
        print(f"{label:<28} {tokens(json_chars):>12.0f} {tokens(compact_chars):>10.0f} {saved:>7.0%}")
    ratios = sorted(compact / baseline for _, baseline, compact in rows)
    p95 = ratios[min(len(ratios) - 1, round(0.95 * (len(ratios) - 1)))]
    total = sum(c for *_, c in rows) / sum(b for _, b, _ in rows)
    print(f"\ncompact/JSON ratio over {len(rows)} results: median {statistics.median(ratios):.2f}, p95 {p95:.2f}, "
          f"all tokens together {total:.2f} (saved {1 - total:.0%})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=12, help="sessions to fill (default 12)")
    parser.add_argument("--files", type=int, default=400, help="workspace files for glob (default 400)")
    args = parser.parse_args(argv)
    anyio.run(run, args.sessions, args.files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
