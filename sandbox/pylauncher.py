"""mt-confine in Python: what sandbox/launcher.c does, for a system with no C compiler, and the child-side steps
of the `preexec_fn` path (sandbox/landlock.py `restrictor`).

As a launcher the server runs `<its base interpreter> -I -S -c <this file's source> RULESET_FD FILTER_FD LIMITS
CGROUP_FDS PATH ARGV0 [ARG...]` (the arguments of launcher.c): -I ignores every PYTHON* variable and the user's
site dir, -S imports no site-packages, and the source comes in the argv, so nothing a confined program may write
is read before the confinement holds (sandbox/confine.py checks that no grant writes the interpreter or its
standard library). It imports only the standard library. Any failure writes one line to stderr and exits 126:
the program is never run unconfined.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

TYPE_CHECKING = False  # typing and collections.abc cost a launch ~8 ms of imports: only the type checker reads these
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

PR_CAPBSET_READ, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 23, 24, 28, 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 22, 2, 47, 4
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS and NO_CAP_AMBIENT_RAISE, each with its lock (KEEP_CAPS itself stays off)
SECUREBITS = 0b11101111
SYS_LANDLOCK_RESTRICT_SELF = 446
CAPABILITY_VERSION_3 = 0x20080522
BOUNDING = "capabilities: a root process could not drop its bounding set (it lacks CAP_SETPCAP)"


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def last_cap() -> int:
    """The highest capability this kernel knows."""
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as file:
            return min(int(file.read()), 63)
    except (OSError, ValueError):
        return 40  # CAP_CHECKPOINT_RESTORE, the last in 6.x


def confiner(ruleset: int, program: bytes | None) -> Callable[[], None]:
    """The steps after the limits and cgroups, in order: every capability dropped and checked, no new privileges,
    Landlock, the syscall filter `program` (None: none). Everything is converted here, once; the returned step
    raises OSError (naming the layer) if any fails."""
    libc = ctypes.CDLL(None, use_errno=True)
    prctl, syscall, capget, capset = libc.prctl, libc.syscall, libc.capget, libc.capset
    header, sets = _Header(CAPABILITY_VERSION_3, 0), (_Data * 2)()
    caps = range(last_cap() + 1)
    code = ctypes.create_string_buffer(program or b"", len(program or b""))
    fprog = _Filter(len(program or b"") // 8, ctypes.cast(code, ctypes.c_void_p))
    ulong = ctypes.c_ulong

    def failed(what: str, error: int | None = None) -> OSError:
        error = ctypes.get_errno() if error is None else error
        return OSError(error, f"{what}: {os.strerror(error)}")

    def held() -> int:
        if capget(ctypes.byref(header), sets) != 0:
            raise failed("capabilities: could not read them")
        return sum(s.effective | s.permitted | s.inheritable for s in sets)

    def drop() -> None:
        privileged = held() != 0 or os.geteuid() == 0 or os.getuid() == 0
        for cap in caps:
            dropped = (
                prctl(PR_CAPBSET_READ, ulong(cap), 0, 0, 0) != 1 or prctl(PR_CAPBSET_DROP, ulong(cap), 0, 0, 0) == 0
            )
            if not dropped and privileged:  # a process that holds nothing cannot drop, and needs not (see launcher.c)
                raise failed(BOUNDING)
        prctl(PR_SET_SECUREBITS, ulong(SECUREBITS), 0, 0, 0)  # needs CAP_SETPCAP; see launcher.c
        prctl(PR_CAP_AMBIENT, ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
        ctypes.memset(sets, 0, ctypes.sizeof(sets))
        if capset(ctypes.byref(header), sets) != 0:
            raise failed("capabilities: could not drop every capability")
        if held():
            raise failed("capabilities: could not drop every capability", 1)
        if privileged and any(prctl(PR_CAPBSET_READ, ulong(cap), 0, 0, 0) != 0 for cap in caps):
            raise failed(BOUNDING, 1)

    def confine() -> None:
        drop()
        if prctl(PR_SET_NO_NEW_PRIVS, ulong(1), 0, 0, 0) != 0:
            raise failed("Landlock: could not confine the program")
        if syscall(ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise failed("Landlock: could not confine the program")
        if program is not None and prctl(PR_SET_SECCOMP, ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0):
            raise failed("syscalls: could not load the seccomp filter")

    return confine


def limits(cpu: int, fsize: int, memory: int, groups: list[int]) -> None:
    """The resource limits (0: as inherited; no core file ever) and the cgroup joins, as launcher.c sets them."""
    for which, value, hard in ((resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_FSIZE, fsize, fsize),
                               (resource.RLIMIT_AS, memory, memory)):  # fmt: skip
        if value:
            resource.setrlimit(which, (value, hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for fd in groups:
        os.write(fd, b"0")


def _number(text: str) -> int:
    if not text.isdigit():
        raise OSError(22, f"bad launcher argument {text!r}")
    return int(text)


def main(argv: list[str]) -> None:
    """mt-confine RULESET_FD FILTER_FD LIMITS CGROUP_FDS PATH ARGV0 [ARG...]: confine, then become the program."""
    try:
        if len(argv) < 6:
            raise OSError(22, "mt-confine RULESET_FD FILTER_FD LIMITS CGROUP_FDS PATH ARGV0 [ARG...]")
        ruleset = _number(argv[0])
        held = [ruleset] if argv[1] == "-" else [ruleset, _number(argv[1])]
        program = os.pread(held[1], 1 << 15, 0) if len(held) > 1 else None  # BPF_MAXINSNS instructions at most
        cpu, fsize, memory = (_number(part) for part in argv[2].split(","))
        groups = [] if argv[3] == "-" else [_number(fd) for fd in argv[3].split(",")]
        limits(cpu, fsize, memory, groups)
        step = confiner(ruleset, program)
        for fd in groups:
            os.close(fd)
        step()
        for fd in held:
            os.close(fd)
        env = dict(os.environ)
        env.pop("PWD", None)  # bwrap sets it; the program gets exactly the environment the server gave
    except (OSError, ValueError) as exc:
        _fail(exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))
    try:
        os.execve(argv[4], argv[5:], env)
    except OSError as exc:
        _fail(f"could not start the program: {exc.strerror}")


def _fail(what: str) -> NoReturn:
    os.write(2, f"managed-tools: {what}; the program was not run.\n".encode(errors="replace"))
    os._exit(126)


if __name__ == "__main__":
    main(sys.argv[1:])
