"""The syscall filter of every program we spawn: seccomp, built once per process with libseccomp (ctypes over
libseccomp.so.2), exported as classic BPF into a sealed memfd the launcher loads as its last step before execve.

Derived from Docker's default profile (moby/profiles seccomp/default.json): every call that profile refuses a
container granted no extra capability is refused here too, and more: io_uring, userfaultfd, the keyring, new
namespaces (clone and unshare with a CLONE_NEW* flag; clone3, whose flags sit behind a pointer, answers ENOSYS so
glibc falls back to clone, as Docker does). The rest is allowed: a deny list, not Docker's allow list, because the
programs here are a developer's toolchains and the other layers (Landlock, the mount view, no capabilities) hold
the rest; see docs/decisions/seccomp-filter.md. Refused calls return EPERM, never a kill, so a program fails
cleanly; a call of another architecture (i386's int 0x80 or x32 on x86_64) returns ENOSYS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
from dataclasses import dataclass
from functools import cache

INSTALL = "apt install libseccomp2 (dnf install libseccomp, apk add libseccomp)"
# Refused outright (EPERM). Names the running libseccomp does not know, or this architecture lacks, are skipped.
DENIED = (
    # files by handle and filesystem-wide notification: the "shocker" escape through a bind mount
    "open_by_handle_at", "name_to_handle_at", "fanotify_init",
    # kernel interfaces no tool needs, each a large attack surface
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "add_key", "request_key", "keyctl", "lookup_dcookie", "uselib", "ustat", "sysfs", "_sysctl", "vm86", "vm86old",
    "iopl", "ioperm", "nfsservctl", "create_module", "get_kernel_syms", "query_module",
    # the machine's state: modules, kexec, logs, clocks, accounting, quotas, swap, reboot, names, ttys
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "syslog",
    "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64", "settimeofday", "stime", "adjtimex",
    "acct", "quotactl", "quotactl_fd", "swapon", "swapoff", "reboot", "sethostname", "setdomainname", "vhangup",
    # namespaces and mounts: stepping around the view
    "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
)  # fmt: skip
# Flags that make a namespace (clone's low byte is the exit signal, so CLONE_NEWTIME, 0x80, is unshare's alone).
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x2000000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME = 0x10000000, 0x20000000, 0x40000000, 0x80
CLONE_NAMESPACES = (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                    CLONE_NEWNET)  # fmt: skip

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO_BASE = 0x00050000
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_CMP_MASKED_EQ = 7
MFD_CLOEXEC, MFD_ALLOW_SEALING = 1, 2
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


class SeccompUnavailable(Exception):
    """No filter can be built here: the message says why and what to install."""


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]  # fmt: skip


def _errno(code: int) -> int:
    return SCMP_ACT_ERRNO_BASE | code


@dataclass(frozen=True)
class Filter:
    """The filter as classic BPF: `program` (8-byte instructions) and a sealed memfd holding the same bytes, which
    lives as long as the process and is passed to every launcher."""

    program: bytes
    fd: int
    denied: tuple[str, ...]  # the names this filter refuses, for the layers report


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(f"libseccomp is not installed ({INSTALL})") from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]  # fmt: skip
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _memfd(program: bytes) -> int:
    fd = os.memfd_create("managed-tools-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING)
    try:
        os.write(fd, program)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _build() -> Filter:
    lib = _library()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("libseccomp could not start a filter")
    try:

        def rule(action: int, name: str, *cmps: _ArgCmp) -> bool:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number == -1:  # __NR_SCMP_ERROR: a name this libseccomp does not know
                return False
            args = (_ArgCmp * max(len(cmps), 1))(*cmps)
            done = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), args)
            if done != 0:
                raise SeccompUnavailable(f"libseccomp refused the rule for {name}: {os.strerror(-done)}")
            return True

        if lib.seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, _errno(errno.ENOSYS)) != 0:
            raise SeccompUnavailable("libseccomp could not set the action for other architectures")
        denied = tuple(name for name in DENIED if rule(_errno(errno.EPERM), name))
        rule(_errno(errno.ENOSYS), "clone3")
        for flag in CLONE_NAMESPACES:
            rule(_errno(errno.EPERM), "clone", _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
        for flag in (*CLONE_NAMESPACES, CLONE_NEWTIME):
            rule(_errno(errno.EPERM), "unshare", _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
        read, write = os.pipe()
        try:
            with os.fdopen(read, "rb") as source:
                # a few hundred instructions: far less than a pipe's buffer, so the export never blocks
                done = lib.seccomp_export_bpf(ctx, write)
                os.close(write)
                write = -1
                program = source.read()
        finally:
            if write >= 0:
                os.close(write)
        if done != 0 or not program or len(program) % 8:
            raise SeccompUnavailable(f"libseccomp could not export the filter: {os.strerror(-done or errno.EIO)}")
    finally:
        lib.seccomp_release(ctx)
    return Filter(program, _memfd(program), (*denied, "clone3", "clone and unshare of a new namespace"))


@cache
def _built() -> Filter | str:
    try:
        return _build()
    except (SeccompUnavailable, OSError) as exc:
        return str(exc)


def program() -> Filter:
    """The filter, built once per process; `SeccompUnavailable` says why there is none."""
    found = _built()
    if isinstance(found, str):
        raise SeccompUnavailable(found)
    return found
