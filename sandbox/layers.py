"""What the sandbox holds on this system, layer by layer: what each blocks, whether it is in force, and if not why.

`describe(confinement)` reports a running server's sandbox; `describe()` probes the kernel and the system the same
way start-up does, for `managed-tools where` (it starts nothing, and removes any cgroup the probe made).
`environment_describe`, the start-up log and `serve --require-confinement` read the same list.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from managed_tools.sandbox.confine import Confinement, open_confinement

LayerName = Literal["files", "view", "processes", "network", "limits", "cgroup", "capabilities", "syscalls"]
CAP_SETPCAP = 8


@dataclass(frozen=True)
class Layer:
    """One layer: `blocks` says what it stops; `detail` how it is held here, or why it is not."""

    name: LayerName
    in_force: bool
    blocks: str
    detail: str


def describe(confinement: Confinement | None = None) -> list[Layer]:
    """The layers of `confinement`, or of a sandbox this system would give (probed, then closed)."""
    if confinement is not None:
        return _layers(confinement)
    with tempfile.TemporaryDirectory(prefix="managed-tools-probe-") as work:
        probe = open_confinement([], data_dir=Path(work), network=False)
        try:
            return _layers(probe)
        finally:
            probe.close()


def missing(layers: list[Layer]) -> list[Layer]:
    return [layer for layer in layers if not layer.in_force]


def _entry(c: Confinement) -> str:
    """How a child enters its domain, in words."""
    if c.launcher is None:
        return f"{c.spawn}"
    return "compiled launcher" if c.launcher.kind == "compiled" else "launcher in the server's interpreter (slower)"


def _effective_caps() -> int:
    """This process's effective capabilities, as /proc/self/status shows them."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def _capabilities(c: Confinement, no_kernel: str) -> Layer:
    blocks = ("any capability in a spawned program, a root server's included: opening files by handle through a "
              "bind mount, overriding file permissions, setting the hostname, reading the kernel log")  # fmt: skip
    if c.mode != "landlock":
        return Layer("capabilities", False, blocks, no_kernel)
    again = f"the {c.spawn} drops the bounding set and every capability set before Landlock, and checks"
    if c.bwrap is not None:
        user = " in a user namespace (uid 0 inside has no power outside)" if c.bwrap.userns else ""
        return Layer("capabilities", True, blocks, f"bubblewrap --cap-drop ALL{user}; {again}")
    if os.geteuid() != 0 and not _effective_caps():
        return Layer("capabilities", True, blocks, f"the server holds none; the {c.spawn} clears every set; the "
                     "bounding set stays (only a process with CAP_SETPCAP may drop it) and no new privileges keeps "
                     "exec from granting any")  # fmt: skip
    if _effective_caps() >> CAP_SETPCAP & 1:
        return Layer("capabilities", True, blocks, f"{again}; securebits keep uid 0 from regaining any at exec")
    return Layer("capabilities", False, blocks, "a root server without CAP_SETPCAP and without bubblewrap cannot "
                 "drop the bounding set: the launcher refuses to start confined programs")  # fmt: skip


def _syscalls(c: Confinement, no_kernel: str) -> Layer:
    blocks = ("calls that step around the other layers or that no tool needs: open_by_handle_at, fanotify, bpf, "
              "perf, io_uring, keyrings, modules, kexec, clocks, syslog, mounts, new namespaces")  # fmt: skip
    if c.mode != "landlock":
        return Layer("syscalls", False, blocks, no_kernel)
    if c.filter is None:
        return Layer("syscalls", False, blocks, c.filter_reason)
    return Layer("syscalls", True, blocks, f"a seccomp filter (libseccomp, {len(c.filter.program) // 8} "
                 f"instructions) loaded by the {c.spawn} last: {len(c.filter.denied)} calls answer EPERM, clone3 "
                 "ENOSYS, other architectures' calls ENOSYS")  # fmt: skip


def _layers(c: Confinement) -> list[Layer]:
    kernel = c.mode == "landlock"
    outer = c.bwrap is not None
    no_kernel = f"no Landlock ({c.mode_reason})"
    why_outer = c.bwrap_reason if kernel else no_kernel
    scope = " and abstract unix sockets of other domains" if c.abi >= 6 else ""
    limits = c.limits
    cg = c.cgroups
    cg_what = ", ".join(sorted(cg.controllers)) if cg is not None else ""
    memory_by = "a memory cgroup" if cg is not None and "memory" in cg.controllers else "the address space"
    network = "off for the read-only hand" + (
        " and the shell" if not c.shell_network else
        "; the shell's commands and the upstreams go out only through the egress proxy, to "
        "sandbox.network.allowedDomains" if c.egress is not None else
        f"; the shell's network is on and direct ({c.egress_reason}): shell commands and upstreams share the host's "
        "network")  # fmt: skip
    return [
        Layer(
            "files",
            kernel,
            "reads, writes and runs outside the policy's grants; TCP when the network is off" + scope,
            f"Landlock ABI {c.abi}, entered by the {_entry(c)}" if kernel else no_kernel,
        ),
        Layer(
            "view",
            kernel and outer,
            "seeing any path not granted: the host's /run, /tmp, $HOME, the data dir, "
            "and the named unix sockets there (D-Bus, PostgreSQL, Docker, ssh-agent)",
            "bubblewrap: a mount namespace of the grants only" if kernel and outer else why_outer,
        ),
        Layer(
            "processes",
            kernel and outer,
            "a process outliving its command, shell or upstream (setsid, double "
            "fork); reading other processes in /proc",
            "bubblewrap: a PID namespace per command, shell and upstream, with its own /proc"
            if kernel and outer
            else why_outer,
        ),
        Layer(
            "network",
            kernel and outer,
            "with the network off: TCP, UDP, DNS and the host's abstract unix sockets",
            f"bubblewrap: a network namespace (loopback only); {network}" if kernel and outer else why_outer,
        ),
        Layer(
            "limits",
            kernel,
            "a file larger than sandbox.limits.fileSizeMB, a process past cpuSeconds"
            + ("" if cg is not None and "memory" in cg.controllers else ", memory past memoryMB"),
            f"setrlimit before exec: fileSizeMB {limits.file_size_mb}, cpuSeconds {limits.cpu_seconds}, memory "
            f"{limits.memory_mb} MB by {memory_by}"
            if kernel
            else no_kernel,
        ),
        Layer(
            "cgroup",
            kernel and cg is not None and not cg.missing(),
            "more processes than sandbox.limits.processes (a fork bomb), more memory than memoryMB",
            (
                f"a cgroup per command ({cg_what}): processes {limits.processes}, memory {limits.memory_mb} MB"
                + (f"; missing: {', '.join(cg.missing())}" if cg.missing() else "")
            )
            if kernel and cg is not None
            else c.cgroups_reason or no_kernel,
        ),
        _capabilities(c, no_kernel),
        _syscalls(c, no_kernel),
    ]


def _by_reason(lacking: list[Layer]) -> list[tuple[list[str], str]]:
    """The missing layers grouped by why: a reason shared by several is said once."""
    why: dict[str, list[str]] = {}
    for layer in lacking:
        why.setdefault(layer.detail, []).append(layer.name)
    return [(names, detail) for detail, names in why.items()]


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def summary(layers: list[Layer]) -> str:
    """One line for the log: each layer, and what is missing with why (said once for the layers missing for the
    same reason)."""
    held = ", ".join(layer.name for layer in layers if layer.in_force) or "none"
    lacking = "; ".join(f"{', '.join(names)}: {detail}" for names, detail in _by_reason(missing(layers)))
    return f"sandbox layers in force: {held}" + (f"; missing: {lacking}" if lacking else "")


def shortfall(c: Confinement) -> str | None:
    """Why the writable shell is not the full sandbox, or None when it is: every layer in force, and the network off
    or only through the egress allowlist. The one check `--auto-sandboxed` relies on (tools/shell/jobs.py
    `contained`)."""
    lacking = missing(_layers(c))
    if lacking:
        return "; ".join(
            f"the {_listed(names)} layer{'s are' if len(names) > 1 else ' is'} missing here ({detail})"
            for names, detail in _by_reason(lacking)
        )
    if c.shell_network and c.egress is None:
        return f"the shell's network is unrestricted, not filtered by the egress allowlist ({c.egress_reason})"
    return None


def in_force(c: Confinement) -> str:
    """The sandbox a command ran in, as the audit record of an unasked run names it."""
    held = ", ".join(layer.name for layer in _layers(c) if layer.in_force) or "none"
    network = "off" if not c.shell_network else "through the egress allowlist" if c.egress else "unrestricted"
    return f"layers: {held}; network {network}; {len(c.grants.grants)} toolchain grant(s)"
