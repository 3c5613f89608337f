"""What `bash git` costs per call against `bash ls` (the read-only hand's baseline), measured in one run, interleaved.

In-process (no transport, no client; no-op ports, see noports.py), on one runtime with the default confinement
(Landlock through the compiled launcher where the kernel has it), on a repository of 200 files and 20 commits made
in a temporary workspace. Series:

* `bash ls`: the baseline, one confined spawn;
* `bash git rev-parse HEAD`: the smallest git command, so mostly what every git call adds: two confined probes
  (rev-parse to find the repository, `config --list` to find its drivers) before the command;
* `bash git status --short`, `bash git log --oneline -n 5`, `bash git diff --stat`: what a coding agent runs;
* `git status, no probes`: the same command's spawn alone (fixed environment, no probe), to split the cost.

It is a benchmark, not a test: the exit status is 0 whatever the figures are.

    PYTHONPATH=$PWD python bench/git_hand.py [--calls 200] [--warmup 20] [--json]
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from confine import compare, interleaved, options
from noports import PORTS

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.connection.attach import attach
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.ids import utc_now
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Attachment, Runtime
from managed_tools.tools.shell.git_repository import FIXED_CONFIG, GIT_ENV, config_env
from managed_tools.tools.shell.runner import Job, Output, start_process

AUTHOR = ["-c", "user.name=Bench", "-c", "user.email=b@example.org", "-c", "init.defaultBranch=main"]


def make_repo(root: Path) -> None:
    root.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}

    def run(*args: str) -> None:
        subprocess.run(["git", *AUTHOR, *args], cwd=root, env=env, check=True, capture_output=True)

    run("init", "-q")
    for commit in range(20):
        for i in range(10):
            (root / f"dir{i}").mkdir(exist_ok=True)
            (root / f"dir{i}" / f"file{commit:02}.txt").write_text(f"{commit} {i}\n")
        run("add", "-A")
        run("commit", "-qm", f"commit {commit}")
    (root / "dir0" / "file00.txt").write_text("changed\n")


def call(runtime: Runtime, attachment: Attachment, command: str, *args: str) -> Callable[[], Awaitable[None]]:
    arguments: dict[str, Any] = {"command": command, "args": list(args), "cwd": "/workspace/repo"}

    async def run() -> None:
        result = await execute(runtime, attachment, PORTS, "bash", arguments)
        assert result.status == "success" and result.structured is not None, result.text
        assert result.structured["exitCode"] == 0, result.structured

    return run


def bare_status(runtime: Runtime, repo: Path) -> Callable[[], Awaitable[None]]:
    env = {**GIT_ENV, **config_env(FIXED_CONFIG), "GIT_DIR": str(repo / ".git"),
           "GIT_WORK_TREE": str(repo)}  # fmt: skip

    async def on_done(_: Job) -> None:
        return None

    async def run() -> None:
        job = Job("0" * 16, "bench", "bash", "git", [], "/workspace/repo", utc_now(), Output(4000), Output(4000))
        await start_process(job, ["/usr/bin/git", "--no-pager", "status", "--short"], cwd=str(repo), env=env,
                            limit_s=10, on_done=on_done, confine=runtime.confinement.read_only)  # fmt: skip
        await job.recorded.wait()
        assert job.exit_code == 0, job.stderr.text()

    return run


async def measure(tmp: Path, calls: int, warmup: int) -> tuple[str, dict[str, dict[str, float]]]:
    workspace = tmp / "workspace"
    make_repo(workspace / "repo")
    async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=tmp / "data")) as runtime:
        attachment = await attach(runtime, None, "bench")
        series = {
            "bash ls": call(runtime, attachment, "ls"),
            "bash git rev-parse HEAD": call(runtime, attachment, "git", "rev-parse", "HEAD"),
            "bash git status --short": call(runtime, attachment, "git", "status", "--short"),
            "bash git log --oneline -n 5": call(runtime, attachment, "git", "log", "--oneline", "-n", "5"),
            "bash git diff --stat": call(runtime, attachment, "git", "diff", "--stat"),
            "git status, no probes": bare_status(runtime, workspace / "repo"),
        }
        mode = f"{runtime.confinement.mode} ({runtime.confinement.spawn or 'no spawn'})"
        return mode, await interleaved(series, calls, warmup)


async def main() -> None:
    opts = options(__doc__, 200, 20)
    with tempfile.TemporaryDirectory() as tmp:
        mode, out = await measure(Path(tmp), opts.calls, opts.warmup)
    if opts.json:
        print(json.dumps({"confinement": mode, "calls": opts.calls, "series": out}, indent=2))
        return
    print(f"confinement {mode}, {opts.calls} calls per series after {opts.warmup} warm-up, interleaved")
    for name, f in out.items():
        print(f"  {name:<28} p50 {f['p50_ms']:7.3f} ms   p95 {f['p95_ms']:7.3f} ms   mean {f['mean_ms']:7.3f} ms")
    print("\nagainst the baseline:")
    for name in list(out)[1:]:
        print(compare(out, "bash ls", name))


if __name__ == "__main__":
    anyio.run(main)
