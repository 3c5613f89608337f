"""A thin ctypes layer over Linux Landlock: build a ruleset in the parent, enforce it in the child before exec.

The ruleset (an fd) is built once per policy in the server; the child (`restrictor`) drops its capabilities, calls
prctl(PR_SET_NO_NEW_PRIVS) and landlock_restrict_self(fd) and loads the syscall filter through ctypes function
objects prepared beforehand (sandbox/pylauncher.py), so the code that runs between fork and exec allocates
nothing of note. A child that cannot confine itself raises, and then the exec never happens.
See docs/decisions/landlock-confinement.md and https://docs.kernel.org/userspace-api/landlock.html.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from managed_tools.sandbox import pylauncher
from managed_tools.sandbox.policy import Access, Grant

# x86-64, arm64 and every other architecture share these numbers (they came after the syscall table unification).
SYS_CREATE_RULESET, SYS_ADD_RULE = 444, 445
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

# Filesystem access rights, and the ABI that introduced each one past the first.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the only rights a rule on a file may hold
READ = READ_FILE | READ_DIR
RUN = READ | EXECUTE
WRITE = (
    WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_SYM | REFER | TRUNCATE
)
# Network (ABI 4) and scopes (ABI 6).
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockError(OSError):
    """The kernel refused to build a ruleset."""


_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _syscall() -> Callable[..., int]:
    assert _libc is not None
    call: Callable[..., int] = _libc.syscall
    return call


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, too old, or disabled at boot)."""
    if _libc is None:
        return 0
    version = _syscall()(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                         ctypes.c_uint32(CREATE_RULESET_VERSION))  # fmt: skip
    return max(int(version), 0)


@dataclass(frozen=True)
class Rule:
    """`access` beneath `path` (a directory and everything under it, or one file)."""

    path: str
    access: int


RIGHTS: Mapping[Access, int] = {"list": READ_DIR, "read": READ, "run": RUN, "write": RUN | WRITE,
                                "device": READ_FILE | WRITE_FILE}  # fmt: skip


def rules(grants: Iterable[Grant]) -> list[Rule]:
    """The Landlock rules of a policy's grants (sandbox/policy.py), one per grant."""
    return [Rule(grant.path, RIGHTS[grant.access]) for grant in grants]


def build_ruleset(version: int, rules: Iterable[Rule], *, deny_tcp: bool) -> int:
    """A ruleset fd (close-on-exec) handling every filesystem right `version` knows, allowing only `rules`;
    TCP bind/connect refused when `deny_tcp` (ABI 4+); signals and abstract unix sockets scoped (ABI 6+).
    Paths that do not exist are skipped: a rule cannot grant what is not there."""
    handled_fs = FS_BY_ABI.get(version, FS_BY_ABI[5])
    attr = _RulesetAttr(
        handled_access_fs=handled_fs,
        handled_access_net=NET_BIND_TCP | NET_CONNECT_TCP if deny_tcp and version >= 4 else 0,
        scoped=SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0,
    )
    size = ctypes.sizeof(_RulesetAttr) if version >= 6 else 16 if version >= 4 else 8
    fd = _syscall()(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise LandlockError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for rule in rules:
            _add_path_rule(fd, rule, handled_fs)
    except BaseException:
        os.close(fd)
        raise
    return int(fd)


def _add_path_rule(ruleset: int, rule: Rule, handled_fs: int) -> None:
    try:
        target = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        access = rule.access & handled_fs
        if not os.path.isdir(f"/proc/self/fd/{target}"):
            access &= FILE_RIGHTS
        if not access:
            return
        attr = _PathBeneathAttr(allowed_access=access, parent_fd=target)
        done = _syscall()(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH),
                          ctypes.byref(attr), ctypes.c_uint32(0))  # fmt: skip
        if done != 0:
            errno = ctypes.get_errno()
            raise LandlockError(errno, f"landlock_add_rule {rule.path}: {os.strerror(errno)}")
    finally:
        os.close(target)


def restrictor(ruleset: int, program: bytes | None, before: Callable[[], None]) -> Callable[[], None]:
    """The child-side step (a `preexec_fn`): `before` (limits, cgroups), then what the launcher does
    (sandbox/pylauncher.py `confiner`: every capability dropped, no new privileges, `ruleset` enforced, the syscall
    filter `program` loaded); raise if any fails, so the exec never happens unconfined. Arguments are converted
    here, once."""
    confine = pylauncher.confiner(ruleset, program)

    def step() -> None:
        before()
        try:
            confine()
        except OSError as exc:
            raise OSError(exc.errno, f"{exc.strerror}; the child was not started.") from None

    return step
