"""Where the bytes of `tools/list` go: the answer a stdio server sends for the full catalogue, split by part
(input schemas, output schemas, descriptions, annotations, `_meta`, names, titles) and by tool, for this
checkout and, with `--before DIR` (e.g. `git archive main | tar -x -C DIR`), an earlier one in the same run.

Each server is started as users start it (`serve --workspace ...` over stdio, no preset) and sent the handshake
and `tools/list` as raw JSON-RPC lines (bench/startup.py's), so the figure is the line as sent. Each part is the
compact JSON of that part summed over the tools; the parts and the list around them make up the line. Goal
(issue 41 item 4): at most 60,000 bytes with every output schema kept. A benchmark, not a test: it exits 0.

    python bench/tools_list_bytes.py [--before DIR] [--tools 12] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from startup import HANDSHAKE, MAX_LIST_BYTES, REPO_ROOT, answer, compiled, spawned

PARTS = ("inputSchema", "outputSchema", "description", "annotations", "_meta", "name", "title")


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def measured(checkout: Path, tmp: Path, label: str) -> dict[str, Any]:
    """The line a server started from `checkout` sends for tools/list: its length, per part and per tool."""
    compiled(checkout)
    workspace = tmp / label
    workspace.mkdir()
    serve = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)]
    with spawned([*serve, "--data-dir", f"{workspace}.state"], checkout.resolve()) as process:
        assert process.stdin is not None
        process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in HANDSHAKE))
        process.stdin.flush()
        message, line = answer(process, 2, label)
    tools: list[dict[str, Any]] = message["result"]["tools"]
    return {
        "bytes": len(line.rstrip(b"\n")),
        "tools": len(tools),
        "parts": {part: sum(size(t[part]) for t in tools if part in t) for part in PARTS},
        "per_tool": {t["name"]: {part: size(t[part]) for part in PARTS if part in t} for t in tools},
    }


def print_table(runs: dict[str, dict[str, Any]], top: int) -> None:
    labels = list(runs)
    print(f"{'part':<14}" + "".join(f"{label:>12}" for label in labels))
    print(f"{'whole line':<14}" + "".join(f"{runs[label]['bytes']:>12,}" for label in labels))
    print(f"{'tools':<14}" + "".join(f"{runs[label]['tools']:>12}" for label in labels))
    for part in PARTS:
        print(f"{part:<14}" + "".join(f"{runs[label]['parts'][part]:>12,}" for label in labels))
    latest = runs[labels[-1]]["per_tool"]
    heaviest = sorted(latest, key=lambda name: -sum(latest[name].values()))[:top]
    print(f"\nthe {top} heaviest tools ({labels[-1]}), output schema / input schema / whole tool, bytes")
    for name in heaviest:
        cells = [runs[label]["per_tool"].get(name, {}) for label in labels]
        text = "   ".join(
            f"{c.get('outputSchema', 0):>5,} / {c.get('inputSchema', 0):>5,} / {sum(c.values()):>5,}" for c in cells
        )
        print(f"{name:<34}{text}")
    now = runs[labels[-1]]["bytes"]
    print(f"\ntools/list {now:,} bytes (goal <= {MAX_LIST_BYTES:,}: {'met' if now <= MAX_LIST_BYTES else 'NOT met'})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", type=Path, help="an earlier checkout to measure beside this one, as `before`")
    parser.add_argument("--tools", type=int, default=12, help="how many of the heaviest tools to list (default 12)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-list-") as tmp:
        checkouts = {**({"before": args.before} if args.before is not None else {}), "after": REPO_ROOT}
        runs = {label: measured(checkout, Path(tmp), label) for label, checkout in checkouts.items()}
    if args.json:
        print(json.dumps(runs))
    else:
        print_table(runs, args.tools)
    return 0


if __name__ == "__main__":
    sys.exit(main())
