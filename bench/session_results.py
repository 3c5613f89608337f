"""What a typical 20-call coding session's results cost the model: characters per result (issue 38, item 15).

The session is tests/support/typical_session.py's, run through a real in-process `mcp.Client` on a fresh
workspace and state file, every question approved. With `--before PATH` (a checkout of another tree, e.g. main in
a temporary worktree) the same session also runs on that tree's code, in a process of its own with
PYTHONPATH=PATH, and both columns print side by side: the before figures come from this same run. Tokens are
estimated as characters / 4. It is a benchmark, not a test: it exits 0 whatever the figures.

    git worktree add --detach /tmp/main main
    python bench/session_results.py --before /tmp/main      # about 10 s
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import typical_session


def _approve() -> Any:
    from mcp import types

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": True})

    return on_elicit


async def measure() -> list[tuple[str, int, bool]]:
    from managed_tools.server.config.serve_config import ServeConfig
    from managed_tools.server.mcp.app import build_server
    from managed_tools.server.runtime.opening import open_runtime

    with tempfile.TemporaryDirectory(prefix="bench-session-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        typical_session.prepare(workspace)
        config = ServeConfig.build(workspace=workspace, data_dir=Path(tmp) / "data", notify=lambda _: None)
        async with open_runtime(config) as runtime:
            server = build_server(runtime, transport="memory")
            async with Client(server, elicitation_callback=_approve()) as client:
                return await typical_session.run(client)


def _on(tree: str) -> list[tuple[str, int, bool]]:
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, __file__, "--json"], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the session failed on {tree}:\n{done.stderr[-2000:]}")
    return [(str(tool), int(chars), bool(failed)) for tool, chars, failed in json.loads(done.stdout)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", help="another checkout whose code runs the same session (the before column)")
    parser.add_argument("--json", action="store_true", help="print this tree's rows as JSON")
    args = parser.parse_args(argv)
    if args.json:
        print(json.dumps(anyio.run(measure)))
        return 0
    now = _on(str(Path(__file__).resolve().parent.parent))
    before = _on(args.before) if args.before else None
    print(f"{'call':<4} {'tool':<24} {'before':>8} {'now':>8}")
    for index, (tool, chars, failed) in enumerate(now):
        was = "" if before is None else f"{before[index][1]}{'!' if before[index][2] else ''}"
        print(f"{index + 1:<4} {tool:<24} {was:>8} {chars:>7}{'!' if failed else ' '}")
    total = sum(chars for _, chars, _ in now)
    line = f"\ntotal result characters: now {total} (~{total / 4:.0f} tokens)"
    if before is not None:
        before_total = sum(chars for _, chars, _ in before)
        line += f", before {before_total} (~{before_total / 4:.0f} tokens): {1 - total / before_total:.0%} less"
    print(line + ("; ! marks an error result" if any(f for *_, f in now) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
