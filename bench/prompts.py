"""How often a scripted coding session asks a person: before (every shell_run asks) and after (`remember: session`,
`--auto-sandboxed`), as counts, with the per-call latency of each series against the ask-every-time baseline.

The session is a coding loop over a real stdio server: a workspace whose `.venv` was made from this machine's
python3 (outside the system directories when it comes from pyenv, uv or a build of its own), running its tests,
listing, grepping and counting lines: `--rounds` rounds of five commands, four distinct. A real `mcp.Client`
answers each question (approve once, or approve for the session) and counts them.

| series | server | the person answers |
|---|---|---|
| once (before) | `serve` | approve, once: what every call needed before remember and auto-sandboxed existed |
| session | `serve` | approve, remember: session |
| auto-sandboxed | `serve --auto-sandboxed --shell-network off` | (never asked) |
| auto, allowlist | `serve --auto-sandboxed` (network through the egress proxy) | approve, once, if ever asked |

It is a benchmark, not a test: the exit status is 0 whatever the figures are.

    python bench/prompts.py [--rounds 4] [--mode auto|legacy|both]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client import ClientRequestContext

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS = ".venv/bin/python -m unittest -q test_one"
ROUND = [TESTS, "ls", "grep -n def test_one.py", TESTS, "wc -l test_one.py"]
SERIES: dict[str, tuple[list[str], dict[str, Any] | None]] = {
    "once (before)": ([], {"approve": True}),
    "session": ([], {"approve": True, "remember": "session"}),
    "auto-sandboxed": (["--auto-sandboxed", "--shell-network", "off"], None),
    "auto, allowlist": (["--auto-sandboxed"], {"approve": True}),
}


def project(root: Path) -> Path:
    workspace = root / "workspace"
    workspace.mkdir()
    python = shutil.which("python3") or sys.executable
    subprocess.run([python, "-m", "venv", "--without-pip", str(workspace / ".venv")], check=True, timeout=120)
    (workspace / "test_one.py").write_text("import unittest\n\nclass T(unittest.TestCase):\n    def test(self): pass\n")
    return workspace


async def session(root: Path, name: str, mode: str, rounds: int) -> dict[str, Any]:
    flags, reply = SERIES[name]
    data_dir = root / f"data-{list(SERIES).index(name)}-{mode}"
    env = {**os.environ, "XDG_CONFIG_HOME": str(root / "config")}  # no user-wide config.json of the person's
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "managed_tools.server", "serve", "--workspace", str(root / "workspace"),
              "--data-dir", str(data_dir), *flags],
        cwd=str(REPO_ROOT),
        env=env,
    )  # fmt: skip
    asked = 0

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        nonlocal asked
        asked += 1
        return types.ElicitResult(action="accept", content=reply or {"approve": False})

    samples, failed = [], 0
    async with Client(params, mode=mode, elicitation_callback=person) as client:
        for command in ROUND * rounds:
            t0 = time.perf_counter()
            result = await client.call_tool("shell_run", {"command": command})
            samples.append((time.perf_counter() - t0) * 1000)
            failed += bool(result.is_error or (result.structured_content or {}).get("exitCode"))
    samples.sort()
    return {
        "commands": len(samples),
        "distinct": len(set(ROUND)),
        "asked": asked,
        "failed": failed,
        "p50_ms": round(statistics.median(samples), 1),
        "p95_ms": round(samples[max(int(len(samples) * 0.95) - 1, 0)], 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds of five commands (default 4: 20 commands)")
    parser.add_argument("--mode", choices=("auto", "legacy", "both"), default="both")
    options = parser.parse_args()
    modes = ["auto", "legacy"] if options.mode == "both" else [options.mode]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        project(root)
        print(f"{'mode':7} {'series':17} {'commands':>8} {'distinct':>8} {'asked':>5} {'failed':>6} "
              f"{'p50 ms':>7} {'p95 ms':>7} {'p50 ratio':>9}")  # fmt: skip
        for mode in modes:
            baseline: float | None = None
            for name in SERIES:
                print(f"running {name} ({mode}) ...", file=sys.stderr)
                row = await session(root, name, mode, options.rounds)
                baseline = baseline or row["p50_ms"]
                ratio = row["p50_ms"] / baseline
                print(f"{mode:7} {name:17} {row['commands']:>8} {row['distinct']:>8} {row['asked']:>5} "
                      f"{row['failed']:>6} {row['p50_ms']:>7} {row['p95_ms']:>7} {ratio:>9.2f}")  # fmt: skip


if __name__ == "__main__":
    anyio.run(main)
