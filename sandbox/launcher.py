"""mt-confine, the compiled launcher that confines a child without a `preexec_fn`: built once, cached, reused.

A `preexec_fn` makes CPython fork the whole server instead of vfork (~13 ms a spawn here against ~0.7 ms); the
launcher (launcher.c, ~100 lines) sets the resource limits, joins the command's cgroups and does the two confining
syscalls itself, so the server spawns it the cheap way (inside bubblewrap, where there is one: sandbox/bwrap.py).
It is compiled on first use with the system C compiler, found on a fixed PATH (never the server's), into
`<user cache dir>/managed-tools/` (0700), named by the SHA-256 of the source, compiler and flags, and moved
into place atomically under a lock, so concurrent servers neither race nor run a half-written file. Where no
compiler works, `LauncherError` says why (and what to install) and the caller uses `interpreter`: the same steps
in Python (sandbox/pylauncher.py), run by the server's own base interpreter, slower to start (see
docs/decisions/compiled-launcher.md for both figures) but every layer the same. The egress bridge (netbridge.c,
sandbox/egress.py) is built the same way, by `compiled`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import platformdirs

from managed_tools.sandbox import pylauncher

SOURCE = Path(__file__).with_name("launcher.c")
COMPILER_PATH = "/usr/local/bin:/usr/bin:/bin"
COMPILERS = ("cc", "gcc", "clang")
# Static first (no dynamic loader at each spawn: ~0.1-0.2 ms less here); plain where no static libc is installed.
FLAG_SETS = (("-O2", "-static"), ("-O2",))
COMPILE_TIMEOUT_S = 60


# What installs a C compiler, by the ID (or ID_LIKE) of /etc/os-release.
INSTALLERS = {"debian": "apt install gcc", "ubuntu": "apt install gcc", "alpine": "apk add build-base",
              "fedora": "dnf install gcc", "rhel": "dnf install gcc", "centos": "dnf install gcc",
              "arch": "pacman -S gcc", "suse": "zypper install gcc"}  # fmt: skip


class LauncherError(Exception):
    """No usable launcher: the message says why (shown in the start-up log, never to a model)."""


@dataclass(frozen=True)
class Launcher:
    """How a child enters its domain without a `preexec_fn`: `argv` runs before the launcher's own arguments
    (RULESET_FD FILTER_FD LIMITS CGROUP_FDS PATH ARGV0 ARG...); `reads` is what it reads before it is confined (so no
    grant may write there, and bubblewrap binds it read-only)."""

    kind: Literal["compiled", "interpreter"]
    argv: tuple[str, ...]
    reads: tuple[str, ...]


def install_hint(os_release: Path = Path("/etc/os-release")) -> str:
    """The one command that installs a C compiler on this system (apt's where the system does not say)."""
    try:
        fields = dict(line.split("=", 1) for line in os_release.read_text().splitlines() if "=" in line)
    except OSError:
        fields = {}
    for name in (fields.get("ID", "") + " " + fields.get("ID_LIKE", "")).replace('"', "").split():
        if name in INSTALLERS:
            return INSTALLERS[name]
    return "apt install gcc, apk add build-base or dnf install gcc"


def compiled_launcher(root: Path | None = None) -> Launcher:
    """The compiled launcher (built when missing), or `LauncherError`."""
    path = str(launcher(root))
    return Launcher("compiled", (path,), (path,))


def interpreter() -> Launcher:
    """The launcher that needs no compiler: the server's base interpreter (never a venv's, whose pyvenv.cfg may sit
    where a program writes) running sandbox/pylauncher.py's source with -I -S. `reads` holds the interpreter, the
    directories it looks in for pyvenv.cfg and its standard library."""
    executable = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    if not os.access(executable, os.X_OK):
        raise LauncherError(f"the server's interpreter {executable} cannot be run")
    source = Path(pylauncher.__file__).read_text(encoding="utf-8")
    found = [executable, os.path.dirname(executable), os.path.dirname(os.path.dirname(executable))]
    found += [os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")]
    return Launcher("interpreter", (executable, "-I", "-S", "-c", source), tuple(dict.fromkeys(found)))


def cache_root() -> Path:
    return Path(platformdirs.user_cache_dir("managed-tools", appauthor=False))


def _compiler(search_path: str) -> str:
    for name in COMPILERS:
        found = shutil.which(name, path=search_path)
        if found:
            return found
    raise LauncherError(f"no C compiler ({', '.join(COMPILERS)}) on {search_path or 'an empty PATH'}: {install_hint()}")


def _private_dir(root: Path) -> Path:
    """`root`, created 0700; refused unless it is a directory of ours that no one else may write."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise LauncherError(f"{root} is not a directory owned by this user")
    if info.st_mode & 0o077:
        root.chmod(0o700)
    return root


def _usable(path: Path) -> bool:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def launcher(root: Path | None = None) -> Path:
    """The path of a working launcher under `root` (default: the user cache dir), building it when missing."""
    return compiled(SOURCE, "the launcher", _fails_closed, root)


def compiled(source_file: Path, what: str, works: Callable[[Path], bool], root: Path | None = None) -> Path:
    """The path of a working build of `source_file` (one of our C helpers, `what` in messages) under `root`
    (default: the user cache dir), building it when missing; `works` checks a fresh build before it is used."""
    directory = _private_dir((root or cache_root()).resolve())
    source = source_file.read_bytes()
    compiler = _compiler(COMPILER_PATH)
    key = hashlib.sha256(b"\0".join([source, compiler.encode(), repr(FLAG_SETS).encode()])).hexdigest()[:32]
    target = directory / f"{source_file.stem}-{key}"
    if _usable(target):
        return target
    with open(directory / "launcher.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another server may be building the same file: wait, then reuse it
        if not _usable(target):
            _build(compiler, source, source_file.name, directory, target, what=what, works=works)
    return target


def _build(
    compiler: str, source: bytes, name: str, directory: Path, target: Path, *, what: str, works: Callable[[Path], bool]
) -> None:
    env = {"PATH": COMPILER_PATH, "LC_ALL": "C"}
    errors: list[str] = []
    with tempfile.TemporaryDirectory(dir=directory, prefix="build-") as work:
        built, copy = Path(work) / "built", Path(work) / name
        copy.write_bytes(source)  # exactly the bytes the name was hashed from
        for flags in FLAG_SETS:
            argv = [compiler, *flags, "-o", str(built), str(copy)]
            try:
                done = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True,
                                      timeout=COMPILE_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as exc:
                errors.append(str(exc))
                continue
            if done.returncode == 0 and works(built):
                built.chmod(0o755)
                os.replace(built, target)
                return
            errors.append((done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1])
    raise LauncherError(f"{os.path.basename(compiler)} could not build {what}: {'; '.join(errors)[:300]}")


def _fails_closed(built: Path) -> bool:
    """The fresh binary runs, and refuses to start a program it cannot confine (fd 0, /dev/null, is no ruleset:
    the kernel refuses it, and the launcher must exit 126 rather than run /bin/true)."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        argv = [str(built), "0", "-", "0,0,0", "-", "/bin/true", "true"]  # ruleset, filter, limits, cgroups, program
        probe = subprocess.run(argv, capture_output=True, timeout=10, check=False, env={}, stdin=subprocess.DEVNULL)
        return probe.returncode == 126 and b"not run" in probe.stderr
    return False
