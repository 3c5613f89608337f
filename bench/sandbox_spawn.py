"""What the full sandbox costs per spawn against Landlock alone, and what the capability drop and the syscall filter
(issue 34) and the launcher that needs no compiler (issue 35) add: p50/p95 and their ratio, measured in one run.

One runtime (the default: every layer this system has), its read-only hand running `ls small` in a temporary
workspace, in two groups of series, each interleaved round robin so drift and noise hit all alike (two groups, not
one: in a single round robin with the no-bubblewrap series, `full` showed 8-10 ms more wall time than the same
domain without its filter, and no more CPU, which vanished with fewer series: an artifact of the mix, kept out of
the comparison). The layers, through `tools.shell.runner.start_process`:

* `landlock`: the launcher with the ruleset and the rlimits, nothing around it (what MANAGED_TOOLS_CONFINEMENT=
  landlock-only runs);
* `landlock+cgroup`: also a cgroup made, joined and removed per spawn;
* `landlock+bwrap`: also bubblewrap's mount view, PID and network namespaces;
* `full`: the read-only hand's domain as served: every layer, the capability drop and the filter included;
The issue 34/35 group:

* `before`: the layers as they were before issue 34 (`--before REV`, default 58b256f): that revision's launcher
  (built from its launcher.c: no capability drop, no filter) and its bubblewrap options (no `--cap-drop ALL`, no
  user, UTS or cgroup namespace), with the same cgroup and view otherwise;
* `full-no-filter`: `full` with no filter loaded (the capability drop alone against `before`);
* `interpreter`: `full` entered through the server's interpreter (sandbox/pylauncher.py) instead of the compiled
  launcher, as on a system with no C compiler.

Each spawn is measured twice: wall time, and CPU time (the server's own plus its children's, from getrusage), which
a loaded machine does not inflate: on a busy shared machine the wall time of a spawn that takes three processes
(bwrap, its PID 1, the program) is mostly waiting for a core. The goal (issue 23): the full sandbox adds at most
5 ms p50 per command. A benchmark, not a test: the exit status is 0 whatever the figures are.

    PYTHONPATH=$PWD python bench/sandbox_spawn.py [--calls 200] [--warmup 20] [--before REV] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from confine import compare, figures, spawn

from managed_tools.sandbox import launcher as launchers
from managed_tools.sandbox import layers
from managed_tools.sandbox.launcher import compiled
from managed_tools.sandbox.spawn import Domain
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime

BEFORE = "58b256f"  # main before issue 34
NEW_OPTIONS = ("--unshare-user", "--unshare-uts", "--unshare-cgroup-try")


def cpu_ms() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime) * 1000


async def interleaved(
    series: dict[str, Callable[[], Awaitable[None]]], calls: int, warmup: int
) -> dict[str, dict[str, float]]:
    """Round robin over `series`, each round starting one series later (so none always follows the same one: a
    spawn pays for some of the previous one's namespaces being torn down): wall and CPU figures of each."""
    wall: dict[str, list[float]] = {name: [] for name in series}
    cpu: dict[str, list[float]] = {name: [] for name in series}
    order = list(series.items())
    for i in range(warmup + calls):
        for name, run in order[i % len(order) :] + order[: i % len(order)]:
            c0, t0 = cpu_ms(), time.perf_counter()
            await run()
            if i >= warmup:
                wall[name].append((time.perf_counter() - t0) * 1000)
                cpu[name].append(cpu_ms() - c0)
    out = {name: figures(values) for name, values in wall.items()}
    out.update({f"{name} (cpu)": figures(values) for name, values in cpu.items()})
    return out


def before_launcher(tmp: Path, rev: str) -> str | None:
    """REV's launcher, built from its launcher.c into a cache of its own (None: git cannot show it here)."""
    root = Path(__file__).resolve().parent.parent
    shown = subprocess.run(["git", "-C", str(root), "show", f"{rev}:sandbox/launcher.c"], capture_output=True,
                           check=False)  # fmt: skip
    if shown.returncode != 0:
        return None
    source = tmp / "before" / "launcher.c"
    source.parent.mkdir()
    source.write_bytes(shown.stdout)
    return str(compiled(source, f"the launcher at {rev}", lambda _: True, tmp / "before-cache"))


def before_view(domain: Domain, launcher: str) -> tuple[str, ...]:
    """`domain`'s bubblewrap options as they were before issue 34, binding `launcher` in place of today's."""
    assert domain.launcher is not None
    view: list[str] = []
    skip = False
    for word in domain.view:
        if skip or word in NEW_OPTIONS or word == "--cap-drop":
            skip = word == "--cap-drop"
            continue
        view.append(launcher if word == domain.launcher.argv[0] else word)
    return tuple(view)


def launched(
    workspace: Path, domain: Domain, *, view: tuple[str, ...], head: tuple[str, ...], filter: int | None,
    old: bool = False,
) -> Callable[[], Awaitable[None]]:  # fmt: skip
    """`ls small` through bubblewrap (`view`) and the launcher `head`, with the filter `filter` (None: "-"; `old`:
    the launcher before issue 34, which takes no filter argument), in a cgroup of `domain`'s: every series of the
    issue 34 group the same way, so that only the launcher, the options and the filter differ."""
    ls = "/usr/bin/ls" if os.path.exists("/usr/bin/ls") else "/bin/ls"
    cpu, fsize, memory = domain.rlimits()
    held = (domain.ruleset,) if filter is None else (domain.ruleset, filter)
    seccomp = [] if old else [str(filter) if filter is not None else "-"]

    async def run() -> None:
        assert domain.cgroups is not None
        group = domain.cgroups.create(domain.limits)
        argv = [*view, "--chdir", str(workspace), "--", *head, str(domain.ruleset), *seccomp, f"{cpu},{fsize},{memory}",
                ",".join(map(str, group.fds)) or "-", ls, "ls", "small"]  # fmt: skip
        try:
            process = await asyncio.create_subprocess_exec(*argv, cwd=workspace, env={"PATH": "/usr/bin:/bin"},
                                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                           pass_fds=(*held, *group.fds))  # fmt: skip
        finally:
            group.close_fds()
        out, err = await process.communicate()
        group.end()
        assert process.returncode == 0 and out, err

    return run


async def measure(tmp: Path, calls: int, warmup: int, rev: str) -> tuple[str, dict[str, dict[str, float]]]:
    workspace = tmp / "workspace"
    (workspace / "small").mkdir(parents=True)
    for i in range(20):
        (workspace / "small" / f"file{i:02}.txt").write_text(f"line {i}\n")
    config = ServeConfig.build(workspace=workspace, data_dir=tmp / "data")
    async with open_runtime(config) as rt:
        full = rt.confinement.read_only
        summary = layers.summary(layers.describe(rt.confinement))
        if full is None or full.spawn != "launcher":
            return summary, {}
        layered = {
            "landlock": spawn(workspace, dataclasses.replace(full, view=(), cgroups=None)),
            "landlock+cgroup": spawn(workspace, dataclasses.replace(full, view=())),
            "landlock+bwrap": spawn(workspace, dataclasses.replace(full, cgroups=None)),
            "full": spawn(workspace, full),
        }
        results = await interleaved(layered, calls, warmup)
        issue: dict[str, Callable[[], Awaitable[None]]] = {}
        if full.cgroups is None or not full.view:
            return summary, results  # the issue 34 group needs bubblewrap and cgroups
        old = before_launcher(tmp, rev)
        assert full.launcher is not None
        if old is not None:
            issue["before"] = launched(workspace, full, view=before_view(full, old), head=(old,), filter=None, old=True)
        issue["caps"] = launched(workspace, full, view=full.view, head=full.launcher.argv, filter=None)
        issue["caps+filter"] = launched(workspace, full, view=full.view, head=full.launcher.argv, filter=full.filter)
        compilers, launchers.COMPILER_PATH = launchers.COMPILER_PATH, ""  # a second runtime, as with no compiler
        try:
            async with open_runtime(config) as without:
                slow = without.confinement.read_only
                assert slow is not None and slow.launcher is not None and slow.launcher.kind == "interpreter"
                issue["interpreter"] = launched(workspace, slow, view=slow.view, head=slow.launcher.argv,
                                                filter=slow.filter)  # fmt: skip
                return summary, results | await interleaved(issue, calls, warmup)
        finally:
            launchers.COMPILER_PATH = compilers


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--before", default=BEFORE, help="the revision whose layers are `before`")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        summary, results = await measure(Path(tmp), options.calls, options.warmup, options.before)
    if not results:
        print(f"no launcher or no Landlock here: nothing to compare ({summary})", file=sys.stderr)
        return
    if options.json:
        print(json.dumps({"layers": summary, "calls": options.calls, "spawn": results}, indent=2))
        return
    print(f"{summary}\n{options.calls} spawns per series after {options.warmup} warm-up, interleaved\n")
    for name, f in results.items():
        print(f"  {name:<22} p50 {f['p50_ms']:7.3f} ms   p95 {f['p95_ms']:7.3f} ms   mean {f['mean_ms']:7.3f} ms")
    print("\nadded (wall, then CPU):")
    pairs = [("landlock", other) for other in ("landlock+cgroup", "landlock+bwrap", "full")]
    if "before" in results:  # issue 34: the capability drop, then the filter too, against the layers before it
        pairs += [("before", "caps"), ("before", "caps+filter"), ("caps", "caps+filter")]
    pairs.append(("caps+filter", "interpreter"))  # issue 35: the launcher that needs no compiler
    for cpu in ("", " (cpu)"):
        for base, other in pairs:
            print(compare(results, base + cpu, other + cpu))


if __name__ == "__main__":
    anyio.run(main)
