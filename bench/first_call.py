"""The first call of a tool family in a fresh server against a warm call of the same tool, in one run.

A tool family's models build their validators and serializers when a call first uses them (defer_build;
docs/decisions/published-catalogue.md), not at start-up: this measures what that moves onto the first call. Each
repetition starts a stdio server, answers the handshake and tools/list (raw JSON-RPC lines, as bench/startup.py),
then calls each family's tool once (first), then each again `--warm` times (warm). A family's first call is timed
in a server where no other family has been called: the server is started again for each family.

Median and p95 of the first call and of the warm ones, and first/warm at the median. With `--before DIR` (an
earlier checkout, e.g. `git archive main | tar -x -C DIR`) that checkout's server runs interleaved, so its first
calls (which built their models at start-up) are the baseline of the same run. A benchmark: it always exits 0.

    python bench/first_call.py [--repeat 5] [--warm 5] [--before DIR] [--json]
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

from startup import HANDSHAKE, REPO_ROOT, answer, p95, spawned

FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "environment": ("environment_describe", {}),
    "sessions": ("session_get_snapshot", {}),
    "memory": ("memory_list", {}),
    "files": ("read", {"path": "notes.txt"}),
    "shell": ("shell_describe", {}),
}


def calls(server: str, cwd: Path, workspace: Path, tool: tuple[str, dict[str, Any]], warm: int) -> list[float]:
    """The call's round trips in ms: the first in a fresh server, then `warm` more."""
    name, arguments = tool
    serve = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
    with spawned([*serve, "--data-dir", f"{workspace}.{server}"], cwd) as process:
        assert process.stdin is not None
        process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in HANDSHAKE))
        process.stdin.flush()
        answer(process, 2, server)  # tools/list
        timings = []
        for n in range(1 + warm):
            call = {
                "jsonrpc": "2.0",
                "id": 100 + n,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
            started = time.perf_counter()
            process.stdin.write(json.dumps(call).encode() + b"\n")
            process.stdin.flush()
            reply, _ = answer(process, 100 + n, server)
            timings.append((time.perf_counter() - started) * 1000)
            if reply.get("result", {}).get("isError") or "error" in reply:
                raise RuntimeError(f"{server}: {name} failed: {json.dumps(reply)[:300]}")
        return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5, help="fresh servers per family and checkout (default: 5)")
    parser.add_argument("--warm", type=int, default=5, help="warm calls after the first (default: 5)")
    parser.add_argument("--before", type=Path, help="an earlier checkout to run beside this one, as `before`")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    servers = {"managed": REPO_ROOT, **({"before": args.before.resolve()} if args.before else {})}
    first: dict[tuple[str, str], list[float]] = {}
    warm: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-first-call-") as tmp:
        for n in range(args.repeat):
            for family, tool in FAMILIES.items():
                for server, cwd in servers.items():
                    workspace = Path(tmp) / f"{family}{n}{server}"
                    workspace.mkdir()
                    (workspace / "notes.txt").write_text("hello\n")
                    timings = calls(server, cwd, workspace, tool, args.warm)
                    first.setdefault((server, family), []).append(timings[0])
                    warm.setdefault((server, family), []).extend(timings[1:])
            print(f"run {n + 1}/{args.repeat}", file=sys.stderr)
    figures = {
        f"{server}/{family}": {
            "tool": FAMILIES[family][0],
            "first_p50_ms": round(statistics.median(first[server, family]), 1),
            "first_p95_ms": round(p95(first[server, family]), 1),
            "warm_p50_ms": round(statistics.median(warm[server, family]), 1),
            "warm_p95_ms": round(p95(warm[server, family]), 1),
            "first_over_warm": round(
                statistics.median(first[server, family]) / statistics.median(warm[server, family]), 1
            ),
        }
        for server in servers
        for family in FAMILIES
    }
    if args.json:
        print(json.dumps({"repeat": args.repeat, "warm": args.warm, "figures": figures}))
        return 0
    print(f"first call of a family in a fresh server vs warm calls ({args.repeat} servers each, {args.warm} warm)\n")
    print(f"{'server/family':<22} {'tool':<22} {'first p50':>9} {'p95':>7} {'warm p50':>9} {'p95':>7} first/warm")
    for key, f in figures.items():
        print(
            f"{key:<22} {f['tool']:<22} {f['first_p50_ms']:>9.1f} {f['first_p95_ms']:>7.1f} {f['warm_p50_ms']:>9.1f} "
            f"{f['warm_p95_ms']:>7.1f} {f['first_over_warm']:>9.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
