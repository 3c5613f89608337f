"""What a sandboxed program may reach: one typed policy that every kernel layer is built from.

A `SandboxPolicy` is a list of `Grant`s (a host path and how far it is open), the network mode and the resource
limits. The Landlock ruleset (sandbox/landlock.py) and the bubblewrap mount view (sandbox/bwrap.py) are both
derived from the same grants: a path a program can see is a path the ruleset lets it use, and adding one grant (a
toolchain prefix, a configured `sandbox.readPaths` entry) opens it in both layers at once; nothing else does.

`Addition` is what a caller may put into the view beyond the grants (the egress proxy's socket, its environment,
a bridge that runs first): it never widens what the Landlock layer allows on the filesystem.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

# How far a path is open, weakest first. list: names only (a vault); read: read files and list; run: read and
# execute; write: run, and create, change, rename and remove beneath it; device: read and write one device file.
Access = Literal["list", "read", "run", "write", "device"]
STRENGTH: Mapping[Access, int] = {"list": 0, "read": 1, "device": 2, "run": 2, "write": 3}

# none: a network namespace of its own (loopback only: no TCP, UDP or DNS out); host: the host's network (TCP as
# Landlock allows); proxied: a namespace of its own whose only way out is what an `Addition` brings in (egress).
Network = Literal["none", "host", "proxied"]

MIB = 1 << 20


@dataclass(frozen=True)
class Grant:
    """`access` to `path` (absolute, on the host; a directory and everything beneath it, or one file)."""

    path: str
    access: Access


@dataclass(frozen=True)
class Limits:
    """Per command, shell or upstream: `processes` alive at once, `memory_mb` resident (a cgroup, else address
    space), `file_size_mb` per file written, `cpu_seconds` per process. 0 means no limit. Config:
    `sandbox.limits` {processes, memoryMB, fileSizeMB, cpuSeconds}."""

    processes: int = 512
    memory_mb: int = 4096
    file_size_mb: int = 1024
    cpu_seconds: int = 600


@dataclass(frozen=True)
class Bind:
    """One more path in the mount view (`source` on the host at `dest` inside), e.g. a proxy's unix socket."""

    source: str
    dest: str
    writable: bool = False


@dataclass(frozen=True)
class Addition:
    """What a caller adds around the grants: mount-view binds, environment variables the program gets, and a
    prefix argv the program runs behind (a bridge: it runs confined, and execs or spawns the rest)."""

    binds: tuple[Bind, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    prefix: tuple[str, ...] = ()


@dataclass(frozen=True)
class SandboxPolicy:
    """One domain: `name` (read-only, shell, upstream:NAME) for messages; what it may reach and use."""

    name: str
    grants: tuple[Grant, ...]
    network: Network = "none"
    limits: Limits = field(default_factory=Limits)
    addition: Addition = field(default_factory=Addition)

    def with_grants(self, extra: Iterable[Grant]) -> SandboxPolicy:
        """This policy with `extra` grants too (toolchain prefixes, configured read/write paths)."""
        return replace(self, grants=(*self.grants, *extra))


def merged(grants: Iterable[Grant]) -> list[Grant]:
    """One grant per path, the strongest asked for, parents before children (the order a mount view needs: a
    child bound after its parent shows through it)."""
    best: dict[str, Grant] = {}
    for grant in grants:
        known = best.get(grant.path)
        if known is None or STRENGTH[grant.access] > STRENGTH[known.access]:
            best[grant.path] = grant
    return sorted(best.values(), key=lambda g: (g.path.rstrip("/").count("/"), g.path))
