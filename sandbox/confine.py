"""Kernel confinement of every process the server spawns, and the private HOME/TMPDIR they run with.

Two policies, built once per runtime (Landlock rulesets held as fds, enforced in each child before exec; how a
child enters one is sandbox/spawn.py: through the compiled launcher where it could be built, else a preexec_fn):

* the read-only hand (`bash` programs, `rg` behind grep/glob): reads the mounts (vaults: listing only) and the
  system paths a program needs to load; executes only system binaries; writes nowhere; no TCP.
* the writable shell (`shell_run`, `shell_exec`, the persistent shell): also writes the writable mounts and the
  private dir, reads a little more of /etc; TCP per `--shell-network`.

Neither policy grants /proc (on this kernel Landlock's ptrace scope still let a confined child read the server's
/proc/<pid>/environ), the data dir, the user's home or /tmp. Where Landlock is missing, children run with the
argument checks only (`argv-only`) and the server says so. Tests force that path, or the preexec_fn spawn, with
MANAGED_TOOLS_CONFINEMENT.
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

from managed_tools.sandbox import landlock
from managed_tools.sandbox.grants import NO_GRANTS, Grants, ToolchainGrant, shell_path
from managed_tools.sandbox.landlock import EXECUTE, READ, READ_DIR, READ_FILE, RUN, WRITE, WRITE_FILE, Rule
from managed_tools.sandbox.launcher import LauncherError, cache_root, launcher
from managed_tools.sandbox.mounts import Mount
from managed_tools.sandbox.paths import inside
from managed_tools.sandbox.spawn import Domain, Spawn
from managed_tools.stores.errors import StoreError

Mode = Literal["landlock", "argv-only"]
# "argv-only": run without Landlock even where the kernel has it; "preexec": Landlock without the launcher.
FORCE_ENV = "MANAGED_TOOLS_CONFINEMENT"

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


class ConfinementError(StoreError):
    """Confinement cannot be set up as configured."""


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    deny_tcp: bool


def _system(extra: Iterable[str] = ()) -> list[Rule]:
    rules = [Rule(d, RUN) for d in SYSTEM_DIRS] + [Rule(f, READ) for f in LOADER_FILES]
    rules += [Rule(d, READ_FILE) for d in READ_DEVICES] + [Rule("/dev/null", READ_FILE | WRITE_FILE)]
    return rules + [Rule(binary, RUN) for binary in extra]


def _mount_rules(mounts: Iterable[Mount], *, writable: bool) -> list[Rule]:
    rules: list[Rule] = []
    for mount in mounts:
        if mount.kind == "vault":
            rules.append(Rule(str(mount.root), READ_DIR))  # names only, never contents
        elif writable and mount.access == "read_write":
            rules.append(Rule(str(mount.root), RUN | WRITE))
        else:
            rules.append(Rule(str(mount.root), READ))
    return rules


def read_only_policy(mounts: Iterable[Mount], binaries: Iterable[str]) -> Policy:
    return Policy(tuple(_system(binaries) + _mount_rules(mounts, writable=False)), deny_tcp=True)


def _shell_system() -> list[Rule]:
    """What a shell or an interpreter needs of the system: binaries and libraries, a little of /etc, devices."""
    etc = sorted({path for pattern in SHELL_ETC for path in glob.glob(f"/etc/{pattern}")})
    rules = _system() + [Rule(path, READ) for path in etc] + [Rule("/sys/devices/system/cpu", READ)]
    return rules + [Rule(d, READ_FILE | WRITE_FILE) for d in WRITE_DEVICES]


def grant_rules(grants: Iterable[ToolchainGrant]) -> list[Rule]:
    """The toolchain's grants as Landlock rules: read and execute, plus write where the person configured it."""
    return [Rule(str(g.path), RUN | WRITE if g.access == "write" else RUN) for g in grants]


def shell_policy(mounts: Iterable[Mount], private: Path, *, network: bool, grants: Grants = NO_GRANTS) -> Policy:
    rules = [*_shell_system(), *_mount_rules(mounts, writable=True), Rule(str(private), RUN | WRITE)]
    return Policy(tuple(rules + grant_rules(grants.grants)), deny_tcp=not network)


def upstream_policy(mounts: Iterable[Mount], home: Path, programs: Iterable[Path], *, network: bool) -> Policy:
    """An upstream MCP server (server/upstream/): the shell's system view, the workspace as its mount says, vault
    names, its own HOME, and the directories its program is installed in (read and run); nothing in the data dir
    (the agent substrate lives there) and no other upstream's HOME."""
    reachable = [m for m in mounts if m.kind in ("workspace", "vault")]
    rules = [*_shell_system(), *_mount_rules(reachable, writable=True), Rule(str(home), RUN | WRITE)]
    return Policy(tuple(rules + [Rule(str(p), RUN) for p in programs]), deny_tcp=not network)


@dataclass
class Confinement:
    """This runtime's confinement: the mode, both policies' domains, how children enter them, the private dir."""

    mode: Mode
    abi: int
    private: Path
    shell_network: bool = True
    grants: Grants = NO_GRANTS  # the writable shell's toolchain beyond its mounts (sandbox/grants.py)
    shell_path: str = DEFAULT_PATH  # the writable shell's PATH: the server's entries it may run from
    read_only: Domain | None = None
    shell: Domain | None = None
    spawn: Spawn | None = None  # None in argv-only mode
    spawn_reason: str = ""  # why children enter through a preexec_fn rather than the launcher
    notices: list[str] = field(default_factory=list)
    shell_rules: tuple[Rule, ...] = ()  # the writable shell's policy, for saying why a command could not run
    _fds: list[int] = field(default_factory=list)

    def shortfall(self) -> str | None:
        """Why the writable shell is not the full sandbox (None when it is): the one check `--auto-sandboxed`
        relies on. Today: Landlock in force, and no unrestricted network."""
        if self.mode != "landlock":
            return "the kernel does not confine spawned programs here (no Landlock)"
        if self.shell_network:
            return "the shell's network is unrestricted (--shell-network on)"
        return None

    def describe(self) -> str:
        """The sandbox in force, as the audit record of an unasked run names it."""
        network = "on" if self.shell_network else "off"
        return f"{self.mode} (ABI {self.abi}), network {network}, {len(self.grants.grants)} toolchain grant(s)"

    def shell_runs(self, path: str) -> bool:
        """Whether the writable shell may execute the real file `path`."""
        return any(rule.access & EXECUTE and inside(path, rule.path) for rule in self.shell_rules)

    @property
    def home(self) -> Path:
        return self.private / "home"

    @property
    def tmp(self) -> Path:
        return self.private / "tmp"

    def domain(self, policy: Policy) -> Domain | None:
        """A domain of its own for `policy` (None in argv-only mode); its ruleset lives as long as the runtime."""
        if self.mode != "landlock":
            return None
        try:
            fd = landlock.build_ruleset(self.abi, policy.rules, deny_tcp=policy.deny_tcp)
        except OSError as exc:
            raise ConfinementError(f"Landlock is present but a ruleset could not be built: {exc}") from exc
        self._fds.append(fd)
        if self.spawn == "launcher" and self.shell is not None and self.shell.launcher is not None:
            return Domain(fd, "launcher", self.shell.launcher)
        return Domain(fd, "preexec", preexec=landlock.restrictor(fd))

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        shutil.rmtree(self.private, ignore_errors=True)


def kernel_abi() -> int:
    """The Landlock ABI children will be confined with; 0 when missing or forced off."""
    if os.environ.get(FORCE_ENV, "") == "argv-only":
        return 0
    return landlock.abi()


def open_confinement(
    mounts: list[Mount], *, data_dir: Path, network: bool, binaries: Iterable[str] = (), grants: Grants = NO_GRANTS
) -> Confinement:
    """Create the private dir (0700, outside every mount) and build both rulesets when the kernel can; the
    writable shell also gets `grants`."""
    roots = [Path(os.path.realpath(m.root)) for m in mounts]
    private = Path(os.path.realpath(tempfile.mkdtemp(prefix="managed-tools-")))
    if any(inside(private, root) for root in roots):
        shutil.rmtree(private, ignore_errors=True)
        raise ConfinementError(
            f"The temporary directory {private.parent} lies inside a mount; set TMPDIR to a directory outside it."
        )
    (private / "home").mkdir(mode=0o700)
    (private / "tmp").mkdir(mode=0o700)
    version = kernel_abi()
    search = shell_path(os.environ.get("PATH", ""), grants, roots, fallback=DEFAULT_PATH)
    if version == 0:
        forced = os.environ.get(FORCE_ENV, "") == "argv-only"
        reason = "forced by " + FORCE_ENV if forced else "the kernel offers no Landlock"
        return Confinement("argv-only", 0, private, network, grants, search, notices=[
            f"confinement: argv-only ({reason}); spawned programs are limited by argument checks alone, not "
            "by the kernel.", *grants.notices])  # fmt: skip
    confinement = Confinement("landlock", version, private, network, grants, search, notices=list(grants.notices))
    policies = (read_only_policy(mounts, binaries), shell_policy(mounts, private, network=network, grants=grants))
    confinement.shell_rules = policies[1].rules
    try:
        for policy in policies:
            confinement._fds.append(landlock.build_ruleset(version, policy.rules, deny_tcp=policy.deny_tcp))
    except OSError as exc:
        confinement.close()
        raise ConfinementError(f"Landlock is present but a ruleset could not be built: {exc}") from exc
    path, confinement.spawn_reason = _launcher(policies)
    confinement.spawn = "preexec" if path is None else "launcher"
    confinement.read_only, confinement.shell = (
        Domain(fd, "preexec", preexec=landlock.restrictor(fd)) if path is None else Domain(fd, "launcher", path)
        for fd in confinement._fds
    )
    data = Path(os.path.realpath(data_dir))
    exposed = [m.mount_path for m, root in zip(mounts, roots, strict=True) if m.kind != "vault" and inside(data, root)]
    if exposed:
        confinement.notices.append(
            f"confinement: the data dir lies inside {exposed[0]}, so spawned programs can read it (Landlock grants "
            "cannot exclude a subdirectory); keep the data dir outside the workspace."
        )
    return confinement


def _launcher(policies: Iterable[Policy]) -> tuple[str | None, str]:
    """The launcher's path, or None and why children will confine themselves in a preexec_fn instead. A launcher
    runs before the domain is entered, so one that a confined program could replace is never used."""
    if os.environ.get(FORCE_ENV, "") == "preexec":
        return None, f"forced by {FORCE_ENV}"
    root = Path(os.path.realpath(cache_root()))
    for policy in policies:
        for rule in policy.rules:
            if rule.access & WRITE and inside(root, os.path.realpath(rule.path)):
                return None, f"the cache dir {root} lies where confined programs may write; set XDG_CACHE_HOME"
    try:
        return str(launcher(root)), ""
    except (OSError, LauncherError) as exc:
        return None, f"no launcher ({exc})"
