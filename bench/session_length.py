"""What a call costs in a long session against a fresh one (issue 39 F1), and what 100 appends keep (F14).

Two sessions in one server (in process, through a real in-process `mcp.Client`), each given 100 ended wakes (so both
list as many traces): the fresh one an event in each, the long one `--events` tool span events in all
(tests/support/session_history.py: one SQL statement, then the kept summaries). The calls alternate between them,
`--rounds` times each, so the machine's load weighs on both alike; it prints the median of `memory_write`,
`resources_promote_to_substrate`, `session_list_traces` and `session_get_snapshot` in each and the ratio. Then 100
appends of 10,000 characters to one memory document: the characters its versions keep against the characters of the
versions written out whole.

Run it on another checkout's code (the before figures) with PYTHONPATH=<that checkout>. It is a benchmark, not a
test: it prints figures and exits 0.

    python bench/session_length.py [--events 100000] [--rounds 30] [--database postgresql://...] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.session_history import WAKES, bulk_history

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime

PROMOTE = "resources_promote_to_substrate"
CALLS: dict[str, dict[str, Any]] = {
    "memory_write": {"target": "session_state", "content": "a working note"},
    PROMOTE: {"sourcePath": "draft.md", "targetPath": "SOUL.md", "overwrite": True},
    "session_list_traces": {},
    "session_get_snapshot": {},
}


async def median_ms(times: list[float]) -> float:
    return round(statistics.median(times) * 1000, 2)


async def measure(tmp: Path, events: int, rounds: int, database: str | None) -> dict[str, Any]:
    workspace = tmp / "workspace"
    workspace.mkdir()
    (workspace / "draft.md").write_text("# Soul\nkept short\n")
    config = ServeConfig.build(workspace=workspace, data_dir=tmp / "data", database=database)
    config = config.model_copy(update={"policy": {PROMOTE: "always_allow"}})
    figures: dict[str, Any] = {"events": events}
    async with open_runtime(config) as runtime:
        fresh_server = build_server(runtime, transport="memory")
        long_server = build_server(runtime, transport="memory")
        async with Client(fresh_server) as fresh, Client(long_server) as long:
            for client, count in ((fresh, WAKES), (long, events)):  # as many wakes to list; 1 event or 1,000 each
                await bulk_history(runtime, await session_of(client), count)
            times: dict[tuple[str, str], list[float]] = {}
            for _ in range(rounds):
                for name, arguments in CALLS.items():
                    for label, client in (("fresh", fresh), ("long", long)):
                        start = time.perf_counter()
                        result = await client.call_tool(name, arguments)
                        times.setdefault((name, label), []).append(time.perf_counter() - start)
                        assert not result.is_error, result.content
            for name in CALLS:
                at_0, at_n = await median_ms(times[name, "fresh"]), await median_ms(times[name, "long"])
                figures[name] = {"fresh_ms": at_0, "long_ms": at_n, "ratio": round(at_n / at_0, 2)}
            figures["versions"] = await appended(runtime, fresh)
    return figures


async def session_of(client: Client) -> str:
    snapshot = await client.call_tool("session_get_snapshot", {})
    assert snapshot.structured_content is not None
    return str(snapshot.structured_content["sessionId"])


async def appended(runtime: Any, client: Client) -> dict[str, int]:
    """100 appends of 10,000 characters to the fresh session's session_state."""
    session = await session_of(client)
    for n in range(100):
        chunk = f"part {n} " + "x" * 9_990
        result = await client.call_tool("memory_write", {"target": "session_state", "content": chunk, "mode": "append"})
        assert not result.is_error, result.content
    async with runtime.db.read() as tx:
        kept = int(await tx.scalar("SELECT sum(length(content)) FROM memory_versions WHERE scope = ?", (session,)))
        whole = int(await tx.scalar("SELECT sum(size_bytes) FROM memory_versions WHERE scope = ?", (session,)))
    return {"kept_chars": kept, "whole_chars": whole}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--database", default=None, help="a PostgreSQL URL (default: SQLite in a temporary data dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = anyio.run(measure, Path(tmp), args.events, args.rounds, args.database)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"median per call, a fresh session against one of {args.events:,} events ({args.rounds} rounds each):")
    for name in CALLS:
        row = figures[name]
        print(f"  {name:32} {row['fresh_ms']:8.2f} ms {row['long_ms']:8.2f} ms  {row['ratio']:.2f}x")
    versions = figures["versions"]
    print(
        f"100 appends of 10,000 characters: versions keep {versions['kept_chars']:,} characters "
        f"(whole: {versions['whole_chars']:,}, {versions['whole_chars'] / versions['kept_chars']:.1f}x more)"
    )


if __name__ == "__main__":
    main()
