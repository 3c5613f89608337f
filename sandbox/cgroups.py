"""Process and memory limits per command, shell and upstream through the kernel's cgroups: the v2 hierarchy where
the server's own cgroup delegates the `pids` and `memory` controllers, else the v1 `pids` and `memory` hierarchies
(hybrid systems) where we may write.

`Cgroups` is one runtime's parent group in each usable hierarchy, made beneath the server's own cgroup (so a limit
set on the server still holds on what it runs). `Group` is one spawn's child group with its limits. The launcher
joins it (writing "0" to cgroup.procs through a descriptor the server opened) before Landlock and exec, so nothing
the program starts is ever outside it. `Group.counts()` says how often a limit stopped something; when the program
ends, `Group.end()` kills what is left in the group and removes it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from managed_tools.sandbox.policy import MIB, Limits

Controller = Literal["pids", "memory"]
CONTROLLERS: tuple[Controller, ...] = ("pids", "memory")
PREFIX = "managed-tools-"  # then the server's pid and a random suffix
KILL_ROUNDS = 50  # a group being emptied: kill what is in it, then look again (a fork may land in between)


class CgroupsUnavailable(Exception):
    """No cgroup we may write: the message says why."""


@dataclass(frozen=True)
class Hierarchy:
    """Where this runtime makes groups for some controllers: `parent` is the runtime's own group."""

    version: Literal[1, 2]
    parent: Path
    controllers: frozenset[Controller]


@dataclass
class Group:
    """One spawn's cgroup (a directory in each hierarchy) and the cgroup.procs descriptors to hand the child."""

    dirs: list[tuple[Hierarchy, Path]]
    leftover: list[Path]  # the runtime's: groups still being emptied, removed at a later spawn or at close
    fds: list[int] = field(default_factory=list)
    ended: bool = False

    def close_fds(self) -> None:
        """The child has them (or failed to start): the server's copies go."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def counts(self) -> dict[str, int]:
        """How often each limit stopped something in the group so far: `processes` (forks refused), `memory`
        (processes the OOM killer ended)."""
        counts: dict[str, int] = {}
        for hierarchy, path in self.dirs:
            if "pids" in hierarchy.controllers:
                counts["processes"] = _count(path / "pids.events", "max")
            if "memory" in hierarchy.controllers:
                events = path / ("memory.events" if hierarchy.version == 2 else "memory.oom_control")
                counts["memory"] = _count(events, "oom_kill")
        return counts

    def end(self) -> None:
        """Kill whatever is left running in the group, and remove it; one the kernel is still emptying (a process
        being torn down) is removed later, so the caller never waits here."""
        if self.ended:
            return
        self.ended = True
        self.close_fds()
        self.leftover.extend(path for _, path in self.dirs if not _ended(path))


def _count(path: Path, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file (`max 3`, `oom_kill 1`); 0 where it is absent."""
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    return 0


def _kill(path: Path) -> None:
    """SIGKILL every process in the group at `path`."""
    with contextlib.suppress(OSError):
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)


def _removed(path: Path) -> bool:
    """Whether the group at `path` is gone (removed now, or before); False while processes are still in it."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _ended(path: Path) -> bool:
    """One round: kill what is in the group at `path`, then whether it could be removed."""
    _kill(path)
    return _removed(path)


def _empty(path: Path) -> None:
    """Kill every process in the group at `path` and remove it, waiting a little for the kernel (at close only);
    a group that will not empty stays."""
    for _ in range(KILL_ROUNDS):
        if _ended(path):
            return
        time.sleep(0.002)


def _mounts() -> tuple[Path | None, dict[Controller, Path]]:
    """The cgroup2 mount, and each v1 controller's mount, as /proc/self/mounts lists them."""
    unified: Path | None = None
    v1: dict[Controller, Path] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) < 4:
                continue
            where, kind, options = Path(fields[1].replace("\\040", " ")), fields[2], fields[3].split(",")
            if kind == "cgroup2" and unified is None:
                unified = where
            elif kind == "cgroup":
                for controller in CONTROLLERS:
                    if controller in options:
                        v1.setdefault(controller, where)
    return unified, v1


def _own() -> tuple[str | None, dict[Controller, str]]:
    """The server's own cgroup path: in v2, and in each v1 controller's hierarchy."""
    unified: str | None = None
    v1: dict[Controller, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if number == "0" and controllers == "":
                unified = path
            for controller in CONTROLLERS:
                if controller in controllers.split(","):
                    v1[controller] = path
    return unified, v1


def _make(parent: Path) -> Path:
    """A fresh group for this runtime beneath `parent` (0700: only the server's user may join or change it), after
    removing what a server that died without closing left there."""
    _sweep(parent)
    path = parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir(mode=0o700)
    return path


def _sweep(parent: Path) -> None:
    """Empty and remove our groups under `parent` whose server process is gone (killed before it could close)."""
    with contextlib.suppress(OSError):
        for stale in parent.glob(f"{PREFIX}*-*"):
            pid = stale.name.removeprefix(PREFIX).split("-", 1)[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                for child in (c for c in stale.iterdir() if c.is_dir()):
                    _empty(child)
                _empty(stale)


class Cgroups:
    """This runtime's groups: where each controller is, and the spawns' groups beneath."""

    def __init__(self, hierarchies: list[Hierarchy]) -> None:
        self.hierarchies = hierarchies
        self.controllers = frozenset(c for h in hierarchies for c in h.controllers)
        self.leftover: list[Path] = []

    @classmethod
    def open(cls) -> Cgroups:
        """Groups for `pids` and `memory` where the kernel lets us make them; raise when for neither."""
        mount, v1_mounts = _mounts()
        own, v1_own = _own()
        hierarchies: list[Hierarchy] = []
        reasons: list[str] = []
        if mount is not None and own is not None:
            base = mount / own.lstrip("/")
            delegated = set((base / "cgroup.subtree_control").read_text().split()) if base.is_dir() else set()
            wanted = frozenset(c for c in CONTROLLERS if c in delegated)
            if wanted:
                try:
                    parent = _make(base)
                    (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(wanted)))
                    hierarchies.append(Hierarchy(2, parent, wanted))
                except OSError as exc:
                    reasons.append(f"cgroup v2 {base}: {exc.strerror or exc}")
            else:
                reasons.append(f"cgroup v2 {base} does not delegate pids or memory")
        for controller in CONTROLLERS:
            if any(controller in h.controllers for h in hierarchies):
                continue
            if controller not in v1_mounts or controller not in v1_own:
                reasons.append(f"no cgroup v1 {controller} hierarchy")
                continue
            try:
                parent = _make(v1_mounts[controller] / v1_own[controller].lstrip("/"))
            except OSError as exc:
                reasons.append(f"cgroup v1 {controller}: {exc.strerror or exc}")
                continue
            hierarchies.append(Hierarchy(1, parent, frozenset({controller})))
        if not hierarchies:
            raise CgroupsUnavailable("; ".join(reasons))
        return cls(hierarchies)

    def missing(self) -> list[Controller]:
        return [c for c in CONTROLLERS if c not in self.controllers]

    def create(self, limits: Limits) -> Group:
        """A group for one spawn with `limits` set, and its cgroup.procs open for the child to join."""
        self.leftover[:] = [path for path in self.leftover if not _ended(path)]  # a fork that raced the kill too
        group = Group([], self.leftover)
        try:
            for hierarchy in self.hierarchies:
                path = hierarchy.parent / f"g{secrets.token_hex(6)}"
                path.mkdir(mode=0o700)
                group.dirs.append((hierarchy, path))
                if "pids" in hierarchy.controllers and limits.processes:
                    (path / "pids.max").write_text(str(limits.processes))
                if "memory" in hierarchy.controllers and limits.memory_mb:
                    name = "memory.max" if hierarchy.version == 2 else "memory.limit_in_bytes"
                    (path / name).write_text(str(limits.memory_mb * MIB))
                group.fds.append(os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            group.end()
            raise
        return group

    def close(self) -> None:
        """Empty and remove every group this runtime made."""
        for hierarchy in self.hierarchies:
            with contextlib.suppress(OSError):
                for child in hierarchy.parent.iterdir():
                    if child.is_dir():
                        _empty(child)
            _empty(hierarchy.parent)
