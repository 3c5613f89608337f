"""The outer layers, through bubblewrap (Debian's `bubblewrap`, as Flatpak and Claude Code's sandbox runtime use it):
a mount view of only the policy's grants, a PID namespace, and a network namespace unless the network is on.

* Mount view: a fresh root with each grant bound at its own path (read-only unless the grant writes), a fresh
  /proc of the command's own PID namespace (so no other process's environ or fds are there to read), a minimal
  /dev, and nothing else: no /run, /var/run, /tmp, $HOME or data dir, so no named unix socket of the host (D-Bus,
  PostgreSQL, Docker, ssh-agent) exists to connect to. Landlock, inside it, stays the layer that decides access.
* PID namespace: bwrap's init is PID 1; when the program it started ends, the kernel kills everything left in the
  namespace (a `setsid` or double-forked child included), and `--die-with-parent` ends it if the server goes.
* Network namespace: loopback only (no TCP, UDP or DNS out; abstract unix sockets are per namespace, so the
  host's are unreachable). With the network on, the host's network is shared (egress filtering comes separately).
* No capability: `--cap-drop ALL` (bwrap started by root otherwise keeps every one), and a user namespace where the
  kernel allows one, so that uid 0 inside (a root server's commands) holds no capability over anything outside; a
  UTS namespace (no hostname of the host's to set) and a cgroup namespace where the kernel has one.

The argv is built once per domain (`prefix`), then per spawn only the cwd and the program are added.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from managed_tools.sandbox.policy import Grant, SandboxPolicy, merged

BWRAP_PATH = "/usr/bin:/bin"
PROBE_TIMEOUT_S = 10
# /dev and /proc are made fresh inside (bwrap's minimal /dev binds null, zero, full, random, urandom and tty from
# the host, the inodes the Landlock rules name); grants beneath them need no bind of their own.
FRESH = ("/dev", "/proc")


@dataclass(frozen=True)
class Bubblewrap:
    """A bwrap that works on this system (found and probed once per process); `userns`: it can make a user
    namespace here."""

    path: str
    userns: bool = True


class BwrapUnavailable(Exception):
    """No working bwrap: the message says why (shown in the layers report and the start-up log)."""


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _view(grants: Iterable[Grant]) -> list[str]:
    """The bind options for `grants`, parents first. A grant that is a symlink into another grant (merged /usr's
    /bin -> usr/bin) is recreated as that symlink, so both names keep working as on the host."""
    ordered = [g for g in merged(grants) if not _under(g.path, FRESH)]
    paths = [g.path for g in ordered]
    argv: list[str] = []
    for grant in ordered:
        if os.path.islink(grant.path):
            target = os.path.realpath(grant.path)
            if _under(target, (p for p in paths if p != grant.path)):
                argv += ["--symlink", os.readlink(grant.path), grant.path]
                continue
        argv += ["--bind-try" if grant.access == "write" else "--ro-bind-try", grant.path, grant.path]
    return argv


def namespaces(bwrap: Bubblewrap) -> list[str]:
    """The namespace and capability options every sandbox gets (the probe's too). Without a user namespace, bwrap
    run by root drops every capability but leaves the bounding set (so uid 0 could regain them at an exec without
    no-new-privs): it keeps CAP_SETPCAP alone, with which the launcher drops the bounding set, locks the securebits
    and then drops CAP_SETPCAP too."""
    user = ["--unshare-user"] if bwrap.userns else []
    setpcap = ["--cap-add", "CAP_SETPCAP"] if not bwrap.userns and os.geteuid() == 0 else []
    return [bwrap.path, *user, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--cap-drop", "ALL", *setpcap, "--die-with-parent"]  # fmt: skip


def prefix(
    bwrap: Bubblewrap, policy: SandboxPolicy, *, launcher: Iterable[str], hidden: Iterable[Path] = ()
) -> list[str]:
    """Everything before `--chdir`: the namespaces, the view of `policy`'s grants and its additions' binds, what
    the launcher reads (`launcher`, bound read-only at its own path where no grant binds it already: it runs before
    Landlock and must be there to be run), and an empty directory or /dev/null laid over each `hidden` path
    (credentials a grant covers; sandbox/grants.py)."""
    argv = namespaces(bwrap)
    if policy.network != "host":
        argv.append("--unshare-net")
    argv += _view(policy.grants)
    for bind in policy.addition.binds:
        argv += ["--bind" if bind.writable else "--ro-bind", bind.source, bind.dest]
    bound = [grant.path for grant in merged(policy.grants)]
    for read in launcher:
        if not _under(read, bound):
            argv += ["--ro-bind", read, read]
    for path in hidden:
        argv += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    return [*argv, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/"]


def command(head: list[str], cwd: str | None) -> list[str]:
    """`head` (a `prefix`) for one spawn in `cwd`; the caller appends what runs inside."""
    return [*head, *(["--chdir", cwd] if cwd is not None else []), "--"]


def find() -> Bubblewrap:
    """A bwrap on the system PATH that can make every namespace we ask for here; else `BwrapUnavailable` says
    why. Probed once per process with the namespaces the spawns use (user namespaces may be refused by the kernel
    or by policy, e.g. Ubuntu's AppArmor restriction, and bwrap needs one where it is not setuid or root)."""
    found = _probe()
    if isinstance(found, str):
        raise BwrapUnavailable(found)
    return found


def probe_early() -> None:
    """Start the probe now; `find` reads its answer when first asked. The probe (~10 ms here, ~50 ms on a busy
    machine, most of it the kernel making namespaces) then runs while `serve` imports the rest of the server. A
    process, not a thread: nothing of ours runs until `find`, so it takes no time from the imports."""
    _started()


@cache
def _started(userns: bool = True) -> tuple[Bubblewrap, subprocess.Popen[bytes]] | str:
    """The probe, running (started once per process, early or by `find`), or why it could not start."""
    path = shutil.which("bwrap", path=BWRAP_PATH)
    if path is None:
        return "bubblewrap is not installed (apt install bubblewrap)"
    found = Bubblewrap(path, userns)
    probe = [*namespaces(found), "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--",
             "/bin/true"]  # fmt: skip
    try:  # its few lines of stderr fit in the pipe's buffer, so it never waits for us to read them
        return found, subprocess.Popen(probe, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, env={})  # fmt: skip
    except OSError as exc:
        return f"bubblewrap could not run: {exc}"


@cache
def _probe() -> Bubblewrap | str:
    """A user namespace first; where the kernel (or its policy) refuses one to a process that does not need it
    (root, or a setuid bwrap), the same without."""
    first = _answer(_started())
    if isinstance(first, Bubblewrap) or not (os.geteuid() == 0 or _setuid()):
        return first
    second = _answer(_started(False))
    return second if isinstance(second, Bubblewrap) else first


def _setuid() -> bool:
    path = shutil.which("bwrap", path=BWRAP_PATH)
    return path is not None and bool(os.stat(path).st_mode & 0o4000)


def _answer(started: tuple[Bubblewrap, subprocess.Popen[bytes]] | str) -> Bubblewrap | str:
    if isinstance(started, str):
        return started
    found, process = started
    try:
        _, stderr = process.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        process.kill()
        process.wait()
        return f"bubblewrap could not run: {exc}"
    if process.returncode != 0:
        why = stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot make namespaces here: {why[-1] if why else f'exit {process.returncode}'}"
    return found
