"""The sandbox of every process the server spawns: its policies, its layers, and each domain's private dirs.

Three kinds of policy (sandbox/policy.py: one list of grants drives every layer):

* the read-only hand (`bash` programs, `rg` behind grep/glob): reads the mounts (vaults: listing only) and the
  system paths a program needs to load; executes only system binaries; writes nowhere; no network.
* the writable shell (`shell_run`, `shell_exec`, the persistent shell): also writes the writable mounts and its own
  private dir, reads a little more of /etc; network per `--shell-network`.
* each upstream server: the shell's system view, the workspace, its own private dir, its program's directories.

Each domain's private dir (HOME, TMPDIR) is its own: the shell's domain cannot see an upstream's, nor one upstream
another's. None is granted /proc of the host (a fresh one of its own PID namespace is), the data dir, the user's
home, /run or /tmp.

The layers (sandbox/layers.py reports them): Landlock (files, and TCP when the network is off), then around it
bubblewrap's mount view, PID, network and user namespaces (sandbox/bwrap.py), the resource limits the launcher
sets, a cgroup per spawn for processes and memory (sandbox/cgroups.py), no capability (bwrap's and the
launcher's drop) and a syscall filter (sandbox/syscalls.py). Where Landlock is missing, children run with the
argument checks only (`argv-only`) and the server says so. MANAGED_TOOLS_CONFINEMENT forces a weaker mode for
tests: `argv-only`, `preexec` (no launcher, hence no bubblewrap), `landlock-only` (no bubblewrap, no cgroups).
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from managed_tools.errors import StoreError
from managed_tools.sandbox import bwrap, landlock, syscalls
from managed_tools.sandbox.cgroups import Cgroups, CgroupsUnavailable
from managed_tools.sandbox.egress import CONFIG_KEY, Egress, NetworkConfig, bridge
from managed_tools.sandbox.grants import NO_GRANTS, Grants, ToolchainGrant, shell_path
from managed_tools.sandbox.launcher import Launcher, LauncherError, cache_root, compiled_launcher, interpreter
from managed_tools.sandbox.mounts import Mount
from managed_tools.sandbox.paths import inside
from managed_tools.sandbox.policy import Grant, Limits, Network, SandboxPolicy
from managed_tools.sandbox.spawn import Domain, Spawn

Mode = Literal["landlock", "argv-only"]
FORCE_ENV = "MANAGED_TOOLS_CONFINEMENT"
FORCED = ("argv-only", "preexec", "landlock-only")

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
LOADER_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/locale.alias", "/etc/localtime")
# What a shell and the usual interpreters and build tools read of /etc (names, DNS, TLS roots, their own config);
# never /etc as a whole, which holds shadow, ssh host keys and the like.
SHELL_ETC = ("passwd", "group", "nsswitch.conf", "hosts", "host.conf", "resolv.conf", "gai.conf", "services",
             "protocols", "networks", "ssl", "ca-certificates", "ca-certificates.conf", "mime.types", "magic",
             "magic.mime", "gitconfig", "inputrc", "pip.conf", "npmrc", "os-release", "timezone", "terminfo",
             "alternatives", "python3*", "java-*", "maven", "perl")  # fmt: skip
READ_DEVICES = ("/dev/zero", "/dev/urandom", "/dev/random")
WRITE_DEVICES = ("/dev/null", "/dev/full", "/dev/tty")
DEFAULT_LIMITS = Limits()


class ConfinementError(StoreError):
    """Confinement cannot be set up as configured."""


def forced() -> str:
    """The weaker mode MANAGED_TOOLS_CONFINEMENT asks for ("" when none)."""
    value = os.environ.get(FORCE_ENV, "")
    return value if value in FORCED else ""


def probe_early() -> None:
    """Start, on a thread, the one probe `open_confinement` runs as a subprocess (bubblewrap's, sandbox/bwrap.py),
    so `serve` pays for it while it imports the rest of the server rather than after. Nothing when a forced mode
    leaves bubblewrap out."""
    if not forced():
        bwrap.probe_early()


def _network(on: bool) -> Network:
    return "host" if on else "none"


def _system(extra: Iterable[str] = ()) -> list[Grant]:
    grants = [Grant(d, "run") for d in SYSTEM_DIRS] + [Grant(f, "read") for f in LOADER_FILES]
    grants += [Grant(d, "read") for d in READ_DEVICES] + [Grant("/dev/null", "device")]
    return grants + [Grant(binary, "run") for binary in extra]


def _mount_grants(mounts: Iterable[Mount], *, writable: bool) -> list[Grant]:
    grants: list[Grant] = []
    for mount in mounts:
        root = os.path.realpath(mount.root)
        if mount.kind == "vault":
            grants.append(Grant(root, "list"))  # names only, never contents
        elif writable and mount.access == "read_write":
            grants.append(Grant(root, "write"))
        else:
            grants.append(Grant(root, "read"))
    return grants


def read_only_policy(
    mounts: Iterable[Mount], binaries: Iterable[str], limits: Limits = DEFAULT_LIMITS
) -> SandboxPolicy:
    grants = _system(binaries) + _mount_grants(mounts, writable=False)
    return SandboxPolicy("read-only", tuple(grants), "none", limits)


def _shell_system() -> list[Grant]:
    """What a shell or an interpreter needs of the system: binaries and libraries, a little of /etc, devices."""
    etc = sorted({path for pattern in SHELL_ETC for path in glob.glob(f"/etc/{pattern}")})
    grants = _system() + [Grant(path, "read") for path in etc] + [Grant("/sys/devices/system/cpu", "read")]
    return grants + [Grant(d, "device") for d in WRITE_DEVICES]


def toolchain(grants: Iterable[ToolchainGrant]) -> list[Grant]:
    """The toolchain's grants (sandbox/grants.py) as policy grants: run, or write where the person configured it."""
    return [Grant(str(g.path), g.access) for g in grants]


def shell_policy(
    mounts: Iterable[Mount],
    private: Path,
    *,
    network: bool,
    limits: Limits = DEFAULT_LIMITS,
    grants: Grants = NO_GRANTS,
) -> SandboxPolicy:
    base = [*_shell_system(), *_mount_grants(mounts, writable=True), Grant(str(private), "write")]
    return SandboxPolicy("shell", tuple(base), _network(network), limits).with_grants(toolchain(grants.grants))


def upstream_policy(
    name: str, mounts: Iterable[Mount], home: Path, programs: Iterable[Path], *, network: bool,
    limits: Limits = DEFAULT_LIMITS, grants: Grants = NO_GRANTS,
) -> SandboxPolicy:  # fmt: skip
    """An upstream MCP server (server/upstream/): the shell's system view, the workspace as its mount says, vault
    names, its own private dir, the directories its program is installed in and the shell's toolchain (read and
    run, never write: the person's writePaths are the shell's); nothing in the data dir (the agent substrate lives
    there), no other upstream's private dir, not the shell's. Upstreams are long-lived: no CPU-time limit."""
    reachable = [m for m in mounts if m.kind in ("workspace", "vault")]
    allowed = [*_shell_system(), *_mount_grants(reachable, writable=True), Grant(str(home), "write")]
    allowed += [Grant(str(p), "run") for p in [*programs, *(g.path for g in grants.grants)]]
    always = Limits(limits.processes, limits.memory_mb, limits.file_size_mb, 0)
    return SandboxPolicy(f"upstream:{name}", tuple(allowed), _network(network), always)


def toolchain_env(root: Path, grants: Grants) -> dict[str, str]:
    """A domain's caches, each through the tool's own variable, in its private dir `root` (made here), so pip,
    npm, go and cargo never write the person's home; the person's Go module cache and cargo registry are read
    through them where granted (a file:// GOPROXY; links in the private CARGO_HOME). VIRTUAL_ENV as an activated
    venv sets it."""
    cache, cargo, gopath = root / "cache", root / "cargo", root / "go"
    for where in (cache, cargo, gopath):
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
    shared = dict(grants.shared)
    for role in ("registry", "git"):
        source = shared.get(f"cargo-{role}")
        if source is not None and not (cargo / role).is_symlink():
            (cargo / role).symlink_to(source)
    env = {"XDG_CACHE_HOME": str(cache), "PIP_CACHE_DIR": str(cache / "pip"), "npm_config_cache": str(cache / "npm"),
           "npm_config_update_notifier": "false", "GOPATH": str(gopath), "GOCACHE": str(cache / "go-build"),
           "GOFLAGS": "-modcacherw", "CARGO_HOME": str(cargo), **dict(grants.env)}  # fmt: skip
    if (modcache := shared.get("go-modcache")) is not None:
        env["GOPROXY"] = f"file://{modcache}/cache/download,https://proxy.golang.org,direct"
    return env


def hidden(policy: SandboxPolicy, denied: Iterable[Path]) -> list[Path]:
    """The denied paths that exist beneath one of `policy`'s grants (a workspace that holds a ~/.ssh): Landlock
    cannot carve them out, so the view lays something empty over them."""
    return [p for p in denied if os.path.lexists(p) and any(inside(p, g.path) and str(p) != g.path
                                                            for g in policy.grants)]  # fmt: skip


def runs_in(grants: Iterable[Grant], path: str) -> bool:
    """Whether a domain of `grants` may execute the real file `path`."""
    return any(g.access in ("run", "write") and inside(path, g.path) for g in grants)


@dataclass
class Confinement:
    """This runtime's sandbox: the mode, the layers found, the two standing domains, the private dirs."""

    mode: Mode
    abi: int
    private: Path
    shell_network: bool = True
    limits: Limits = field(default_factory=Limits)
    grants: Grants = NO_GRANTS  # the writable shell's toolchain beyond its mounts (sandbox/grants.py)
    shell_path: str = DEFAULT_PATH  # the writable shell's PATH: the workspace's bins, the server's it may run from
    shell_env: dict[str, str] = field(default_factory=dict)  # its caches and VIRTUAL_ENV (toolchain_env)
    shell_grants: tuple[Grant, ...] = ()  # the writable shell's policy, for saying why a command could not run
    read_only: Domain | None = None
    shell: Domain | None = None
    spawn: Spawn | None = None  # None in argv-only mode
    spawn_reason: str = ""  # why children enter through a preexec_fn or the interpreter, not the compiled launcher
    launcher: Launcher | None = None
    bwrap: bwrap.Bubblewrap | None = None
    bwrap_reason: str = ""  # why there is no mount view, PID or network namespace
    cgroups: Cgroups | None = None
    cgroups_reason: str = ""  # why processes and memory are not limited by a cgroup
    mode_reason: str = ""  # why argv-only
    egress: Egress | None = None  # the proxy the shell's commands go out through (None: network off, or direct)
    egress_reason: str = ""  # why commands with network reach it directly, unfiltered
    filter: syscalls.Filter | None = None  # the seccomp filter every child loads (None: none here)
    filter_reason: str = ""  # why there is none
    notices: list[str] = field(default_factory=list)
    _fds: list[int] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.private / "shell" / "home"

    @property
    def tmp(self) -> Path:
        return self.private / "shell" / "tmp"

    def shell_runs(self, path: str) -> bool:
        """Whether the writable shell may execute the real file `path`."""
        return runs_in(self.shell_grants, path)

    def upstream_home(self, name: str) -> Path:
        """Upstream `name`'s private dir (its HOME, with its TMPDIR inside), 0700, seen by no other domain."""
        home = self.private / "upstreams" / name
        (home / "tmp").mkdir(parents=True, exist_ok=True, mode=0o700)
        return home

    def upstream_env(self, name: str) -> dict[str, str]:
        """What upstream `name` starts with beyond HOME and TMPDIR: the shell's PATH, its own caches."""
        return {"PATH": self.shell_path, **toolchain_env(self.upstream_home(name) / "toolchain", self.grants)}

    def domain(self, policy: SandboxPolicy) -> Domain | None:
        """A domain of its own for `policy` (None in argv-only mode); its ruleset lives as long as the runtime."""
        if self.mode != "landlock":
            return None
        # "proxied" relies on a network namespace for its boundary: without bubblewrap, TCP stays refused.
        deny_tcp = policy.network == "none" or (policy.network == "proxied" and self.bwrap is None)
        try:
            fd = landlock.build_ruleset(self.abi, landlock.rules(policy.grants), deny_tcp=deny_tcp)
        except OSError as exc:
            raise ConfinementError(f"Landlock is present but a ruleset could not be built: {exc}") from exc
        self._fds.append(fd)
        added = policy.addition
        seccomp, program = (self.filter.fd, self.filter.program) if self.filter is not None else (None, None)
        if self.spawn == "preexec" or self.launcher is None:
            return Domain(fd, "preexec", policy.limits, cgroups=self.cgroups, prefix=added.prefix, env=added.env,
                          filter=seccomp, program=program)  # fmt: skip
        covered = hidden(policy, self.grants.denied)
        reads = self.launcher.reads
        view = () if self.bwrap is None else tuple(bwrap.prefix(self.bwrap, policy, launcher=reads, hidden=covered))
        return Domain(fd, "launcher", policy.limits, self.launcher, view, self.cgroups, added.prefix, added.env,
                      seccomp, program)  # fmt: skip

    def close(self) -> None:
        if self.egress is not None:
            self.egress.close()
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        if self.cgroups is not None:
            self.cgroups.close()
        shutil.rmtree(self.private, ignore_errors=True)


def kernel_abi() -> int:
    """The Landlock ABI children will be confined with; 0 when missing or forced off."""
    if forced() == "argv-only":
        return 0
    return landlock.abi()


def _private_dir(roots: list[Path]) -> Path:
    """The runtime's private dir (0700, outside every mount), with the shell's HOME and TMPDIR in it."""
    private = Path(os.path.realpath(tempfile.mkdtemp(prefix="managed-tools-")))
    if any(inside(private, root) for root in roots):
        shutil.rmtree(private, ignore_errors=True)
        raise ConfinementError(
            f"The temporary directory {private.parent} lies inside a mount; set TMPDIR to a directory outside it."
        )
    for sub in ("shell", "shell/home", "shell/tmp", "upstreams"):
        (private / sub).mkdir(mode=0o700)
    return private


def open_confinement(
    mounts: list[Mount],
    *,
    data_dir: Path,
    network: bool,
    binaries: Iterable[str] = (),
    limits: Limits = DEFAULT_LIMITS,
    grants: Grants = NO_GRANTS,
    allowed: NetworkConfig | None = None,
) -> Confinement:
    """Create the private dirs and, where the kernel can, every layer and both standing domains; the writable
    shell also gets `grants`."""
    roots = [Path(os.path.realpath(m.root)) for m in mounts]
    private = _private_dir(roots)
    version = kernel_abi()
    search = shell_path(os.environ.get("PATH", ""), grants, roots, fallback=DEFAULT_PATH)
    env = toolchain_env(private / "shell", grants)
    if version == 0:
        reason = "forced by " + FORCE_ENV if forced() == "argv-only" else "the kernel offers no Landlock"
        return Confinement("argv-only", 0, private, network, limits, grants, search, env, mode_reason=reason,
                           notices=[f"confinement: argv-only ({reason}); spawned programs are limited by argument "
                                    "checks alone, not by the kernel.", *grants.notices])  # fmt: skip
    confinement = Confinement("landlock", version, private, network, limits, grants, search, env,
                              notices=list(grants.notices))  # fmt: skip
    shell = shell_policy(mounts, private / "shell", network=network, limits=limits, grants=grants)
    policies = (read_only_policy(mounts, binaries, limits), shell)
    confinement.shell_grants = shell.grants
    confinement.launcher, confinement.spawn_reason = _launcher(policies)
    confinement.spawn = "preexec" if confinement.launcher is None else "launcher"
    try:
        confinement.filter = syscalls.program()
    except syscalls.SeccompUnavailable as exc:
        confinement.filter_reason = str(exc)
    _outer_layers(confinement)
    if network:
        confinement.egress, confinement.egress_reason = _egress(confinement, allowed or NetworkConfig())
    if confinement.egress is not None:
        policies = (policies[0], confinement.egress.confine(policies[1]))
    elif network:
        confinement.notices.append(f"network: commands with network reach it directly, not filtered by "
                                   f"{CONFIG_KEY} ({confinement.egress_reason}).")  # fmt: skip
    try:
        confinement.read_only, confinement.shell = (confinement.domain(p) for p in policies)
    except ConfinementError:
        confinement.close()
        raise
    data = Path(os.path.realpath(data_dir))
    exposed = [m.mount_path for m, root in zip(mounts, roots, strict=True) if m.kind != "vault" and inside(data, root)]
    covered = [str(p) for p in grants.denied if os.path.lexists(p) and any(inside(p, root) for root in roots)]
    if covered:
        confinement.notices.append(
            f"confinement: {', '.join(covered)} lies inside a mount; "
            + ("the view hides it, " if confinement.bwrap is not None else "")
            + "but Landlock cannot exclude a subdirectory: keep credentials outside the workspace."
        )
    if exposed:
        confinement.notices.append(
            f"confinement: the data dir lies inside {exposed[0]}, so spawned programs can read it (Landlock grants "
            "cannot exclude a subdirectory); keep the data dir outside the workspace."
        )
    return confinement


def _egress(confinement: Confinement, allowed: NetworkConfig) -> tuple[Egress | None, str]:
    """The proxy the shell's commands reach the network through, or None and why they reach it directly."""
    if confinement.bwrap is None:
        return None, f"no network namespace: {confinement.bwrap_reason}"
    try:
        return Egress(allowed, bridge=bridge()), ""
    except (OSError, LauncherError) as exc:
        return None, f"no network bridge: {exc}"


def _outer_layers(confinement: Confinement) -> None:
    """bubblewrap and cgroups where this system has them, else why not."""
    if forced() == "landlock-only":
        confinement.bwrap_reason = confinement.cgroups_reason = f"forced off by {FORCE_ENV}=landlock-only"
        return
    if confinement.launcher is None:
        confinement.bwrap_reason = "no launcher to run inside bubblewrap (" + confinement.spawn_reason + ")"
    else:
        try:
            confinement.bwrap = bwrap.find()
        except bwrap.BwrapUnavailable as exc:
            confinement.bwrap_reason = str(exc)
    try:
        confinement.cgroups = Cgroups.open()
    except CgroupsUnavailable as exc:
        confinement.cgroups_reason = str(exc)


def _launcher(policies: Iterable[SandboxPolicy]) -> tuple[Launcher | None, str]:
    """The launcher, and why it is not the compiled one (or None and why children will confine themselves in a
    preexec_fn instead). A launcher runs before the domain is entered, so one that a confined program could
    replace, or whose interpreter or standard library it could change, is never used."""
    if forced() == "preexec":
        return None, f"forced by {FORCE_ENV}"
    writable = [os.path.realpath(g.path) for policy in policies for g in policy.grants if g.access == "write"]

    def unsafe(paths: Iterable[str]) -> str | None:
        for path in paths:
            for grant in writable:
                if inside(path, grant) or inside(grant, path):
                    return path
        return None

    root = Path(os.path.realpath(cache_root()))
    if unsafe([str(root)]):
        why = f"the cache dir {root} lies where confined programs may write; set XDG_CACHE_HOME"
    else:
        try:
            return compiled_launcher(root), ""
        except (OSError, LauncherError) as exc:
            why = f"no compiled launcher ({exc})"
    try:
        found = interpreter()
    except LauncherError as exc:
        return None, f"{why}; {exc}"
    exposed = unsafe(found.reads)
    if exposed:
        return None, f"{why}; the interpreter's {exposed} lies where confined programs may write"
    return found, f"{why}; the server's interpreter launches instead (slower to start, as confined)"
