"""The long fuzz run: malformed frames against real stdio and HTTP servers in both eras, and schema-driven
arguments for every tool in both eras; the same generators and rules as tests/server/stdio/test_fuzz_frames.py and
tests/tools/framework/test_fuzz_tools.py, with a bigger budget and a seed of your choosing.

It reports counts, every rule broken (the frame or arguments, and why) and the time taken. It is a benchmark,
not a test: it exits 0 whatever it finds.

    python bench/fuzz.py [--frames 2500] [--examples 100] [--seed 1] [--only frames|tools]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the generators live beside the tests

from mcp import Client
from support.fuzz_arguments import Verdicts, fuzz_catalogue
from support.fuzz_frames import ERAS, Era, HttpServer, StdioServer, Tally, fuzz_http, fuzz_stdio

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.catalogue import build_registry


def show_frames(label: str, tally: Tally, seconds: float) -> None:
    answers = ", ".join(f"{name} {count}" for name, count in tally.answers.most_common())
    print(f"{label:<16} {tally.frames:>6} frames {tally.probes:>4} probes {len(tally.failures):>3} failures "
          f"{seconds:7.1f} s  ({tally.frames / seconds:.0f} frames/s)  answers: {answers}")  # fmt: skip
    for where, frame, why in tally.failures[:20]:
        print(f"  FAIL {where}: {frame!r:.160} -> {why}")


def home(root: Path, name: str) -> Path:
    (root / name / "workspace").mkdir(parents=True)
    return root / name


def stdio_series(era: Era, count: int, seed: int, root: Path) -> None:
    where = home(root, f"stdio-{era}")
    print(f"stdio {era} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()  # the server's start-up included
    server = StdioServer(where / "workspace", where / "data", era)
    try:
        tally = fuzz_stdio(server, era, count, seed)
    finally:
        problems = server.stop()
    show_frames(f"stdio/{era}", tally, time.perf_counter() - start)
    for problem in problems:
        print(f"  FAIL {problem}")


def http_series(count: int, seed: int, root: Path) -> None:
    where = home(root, "http")
    server = HttpServer(where / "workspace", where / "data")
    try:
        for era in ERAS:
            print(f"http {era} ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            tally = fuzz_http(server, era, count, seed)
            show_frames(f"http/{era}", tally, time.perf_counter() - start)
    finally:
        problems = server.stop()
    for problem in problems:
        print(f"  FAIL {problem}")


async def tools(examples: int, seed: int, root: Path) -> None:
    names = build_registry().names()
    for mode, allow_all in (("auto", True), ("legacy", False)):
        workspace = home(root, f"tools-{mode}") / "workspace"
        (workspace / "notes.md").write_text("# notes\nhello\n")
        config = ServeConfig.build(workspace=workspace, data_dir=workspace.parent / "data", approval_wait_seconds=1)
        if allow_all:
            config = config.model_copy(update={"policy": dict.fromkeys(names, "always_allow"), "shell_network": False})
        print(f"tools {mode} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        async with open_runtime(config) as runtime:
            server = build_server(runtime, transport="memory", approval_wait_seconds=1)
            async with Client(server, mode=mode) as client:
                verdicts: Verdicts = await fuzz_catalogue(
                    client,
                    examples,
                    host_paths=[workspace, config.data_dir, workspace.parent],
                    data_dir=config.data_dir,
                    seed=seed,
                )
        seconds = time.perf_counter() - start
        policy = "every call allowed" if allow_all else "default policy"
        print(f"tools/{mode:<10} {len(names)} tools x {examples} examples: {verdicts.calls} calls, "
              f"{verdicts.successes} successes, {verdicts.errors} isError, {len(verdicts.failures)} failures, "
              f"{seconds:.1f} s ({policy})")  # fmt: skip
        for tool, args, why in verdicts.failures[:20]:
            print(f"  FAIL {tool} {args!r:.200} -> {why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--frames", type=int, default=2500, help="frames per transport and era (4 series)")
    parser.add_argument("--examples", type=int, default=100, help="argument sets per tool and era")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=["frames", "tools"])
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        root = Path(tmp).resolve()
        if options.only != "tools":
            for era in ERAS:
                stdio_series(era, options.frames, options.seed, root)
            http_series(options.frames, options.seed, root)
        if options.only != "frames":
            anyio.run(tools, options.examples, options.seed, root)


if __name__ == "__main__":
    main()
