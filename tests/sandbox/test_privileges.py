"""No capability and no dangerous syscall survives into what the server spawns, a root server's included (issue 34
C1, items 1-3), through a real MCP client.

Each test runs what got through before: a confined command and a stdio upstream reading their capabilities; the
"shocker" escape (open_by_handle_at on the workspace's bind mount with a handle crafted for a canary's inode outside
every mount, and one in the data dir: the same script, run unconfined by this root test process, reads and writes
both, so only a real escape reaches them); the calls the syscall filter refuses (python3 + ctypes `syscall()`),
with EPERM, and clone3 with ENOSYS; setting the hostname and reading the kernel log. The server runs as root (as
CI and this machine do), under each way in (the full sandbox, Landlock without bubblewrap, the preexec path), and
as an unprivileged uid (`setpriv`) over stdio.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import data, upstreams_started
from mcp import Client, StdioServerParameters
from test_permissions import answer, client_for

from managed_tools.sandbox import bwrap, landlock, layers
from managed_tools.sandbox.confine import FORCE_ENV
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(os.geteuid() != 0, reason="these tests run the server as root, as CI does"),
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the syscall numbers below are x86_64's"),
    pytest.mark.skipif(landlock.abi() == 0, reason="this kernel offers no Landlock"),
]
TESTS = Path(__file__).resolve().parents[1]
YES = answer("accept", {"approve": True})
NOBODY = 65534
CANARY = "canary: nothing spawned may read or change this\n"

# The shocker: open a file by a handle crafted for its inode, through any descriptor on the same filesystem (here
# the workspace, which the sandbox binds), bypassing every path check. Prints one line per handle.
ESCAPE = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class Handle(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint), ("kind", ctypes.c_int), ("bytes", ctypes.c_ubyte * 128)]
at = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
for spec in sys.argv[2:]:
    kind, raw = spec.split(":")
    raw = bytes.fromhex(raw)
    handle = Handle(len(raw), int(kind))
    ctypes.memmove(handle.bytes, raw, len(raw))
    fd = libc.open_by_handle_at(at, ctypes.byref(handle), os.O_RDWR)
    if fd < 0:
        print("refused", os.strerror(ctypes.get_errno()))
        continue
    print("read", os.read(fd, 200).decode().strip())
    os.pwrite(fd, b"escaped", 0)
"""
# Each call with arguments that change nothing even where it is allowed (a bad pointer, length or flag the kernel
# checks after the capability); the errno it returned (0: it succeeded).
CALLS = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
kept = []
def call(number, *args):
    done = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    return 0 if done >= 0 else ctypes.get_errno()
def text(value):
    kept.append(ctypes.create_string_buffer(value))
    return ctypes.addressof(kept[-1])
handle, mount_id = ctypes.create_string_buffer(b"\x80" + bytes(135)), ctypes.c_int()
log = ctypes.create_string_buffer(256)
here = os.open(".", os.O_RDONLY)
out = {
    "name_to_handle_at": call(303, -100, text(b"."), ctypes.addressof(handle), ctypes.addressof(mount_id), 0),
    "open_by_handle_at": call(304, here, ctypes.addressof(handle), 0),
    "fanotify_init": call(300, 0, 0), "bpf": call(321, 0, 0, 0), "perf_event_open": call(298, 0, 0, -1, -1, 0),
    "userfaultfd": call(323, 0), "io_uring_setup": call(425, 1, 0), "keyctl": call(250, 0, 0),
    "add_key": call(248, 0, 0, 0, 0, 0), "init_module": call(175, 0, 0, 0), "finit_module": call(313, -1, 0, 0),
    "kexec_load": call(246, 0, 0, 0, 0xFFFFFFFF), "syslog": call(103, 3, ctypes.addressof(log), 256),
    "sethostname": call(170, text(b"x" * 80), 80), "settimeofday": call(164, 0, 0), "clock_settime": call(227, 0, 0),
    "mount": call(165, 1, 1, 1, 0, 0), "setns": call(308, -1, 0),
    "unshare": call(272, 0x10000000), "clone": call(56, 0x10000000 | 0x10000, 0, 0, 0, 0), "swapon": call(167, 0, 0),
    "acct": call(163, 1), "quotactl": call(179, 0, 0, 0, 0), "reboot": call(169, 0, 0, 0, 0),
    "clone3": call(435, 0, 0), "x32 getpid": call(0x40000000 | 39),
}
try:
    os.close(os.open("/dev/kmsg", os.O_RDONLY))
    out["/dev/kmsg"] = 0
except OSError as exc:
    out["/dev/kmsg"] = exc.errno
print(json.dumps(out))
"""
REFUSED = {name: 1 for name in ("name_to_handle_at", "open_by_handle_at", "fanotify_init", "bpf", "perf_event_open",
           "userfaultfd", "io_uring_setup", "keyctl", "add_key", "init_module", "finit_module", "kexec_load", "syslog",
           "sethostname", "settimeofday", "clock_settime", "mount", "setns", "unshare", "clone", "swapon", "acct",
           "quotactl", "reboot")} | {"clone3": 38, "x32 getpid": 38}  # fmt: skip
# The sets as /proc/self/status shows them (which Landlock keeps unreadable: /proc is not granted), from capget and
# prctl: the same values the kernel prints there.
CAPS = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
sets = (Data * 2)()
assert libc.capget(ctypes.byref(Header(0x20080522, 0)), sets) == 0
def joined(field):
    return getattr(sets[0], field) | getattr(sets[1], field) << 32
bounding = sum(1 << cap for cap in range(64) if libc.prctl(23, cap, 0, 0, 0) == 1)
ambient = sum(1 << cap for cap in range(64) if libc.prctl(47, 1, cap, 0, 0) == 1)
for name, value in (("Inh", joined("inheritable")), ("Prm", joined("permitted")), ("Eff", joined("effective")),
                    ("Bnd", bounding), ("Amb", ambient)):
    print(f"Cap{name}:\t{value:016x}")
"""
STATUS = "python3 caps.py"
NO_CAPS = {f"Cap{k}": "0000000000000000" for k in ("Inh", "Prm", "Eff", "Bnd", "Amb")}


class _Handle(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint), ("kind", ctypes.c_int), ("bytes", ctypes.c_ubyte * 128)]


def handle_of(path: Path) -> str:
    """`kind:hex` of the file handle of `path` (this root process may ask; the sandbox may not)."""
    libc = ctypes.CDLL(None, use_errno=True)
    handle, mount_id = _Handle(128, 0), ctypes.c_int()
    done = libc.name_to_handle_at(-100, os.fsencode(path), ctypes.byref(handle), ctypes.byref(mount_id), 0)
    assert done == 0, os.strerror(ctypes.get_errno())
    return f"{handle.kind}:{bytes(handle.bytes[: handle.size]).hex()}"


def capabilities(text: str) -> dict[str, str]:
    return dict(line.split(":\t") for line in text.strip().splitlines())


class Place:
    """A workspace with the two scripts, a data dir with a canary, a canary outside both."""

    def __init__(self, root: Path, config: dict[str, Any] | None = None) -> None:
        self.workspace, self.data_dir, self.outside = root / "workspace", root / "data", root / "outside"
        for directory in (self.workspace, self.data_dir, self.outside):
            directory.mkdir()
        (self.workspace / "escape.py").write_text(ESCAPE)
        (self.workspace / "calls.py").write_text(CALLS)
        (self.workspace / "caps.py").write_text(CAPS)
        (self.data_dir / "config.json").write_text(json.dumps(config or {}))
        self.canaries = [self.outside / "canary.txt", self.data_dir / "canary.txt"]
        for canary in self.canaries:
            canary.write_text(CANARY)
            canary.chmod(0o666)  # even a nobody-owned server could write it, were it reachable
        self.handles = " ".join(handle_of(c) for c in self.canaries)

    def escape(self) -> str:
        return f"python3 escape.py {self.workspace} {self.handles}"

    def untouched(self) -> bool:
        return all(c.read_text() == CANARY for c in self.canaries)

    def control(self) -> None:
        """The escape, unconfined as root: it reads and changes both canaries, then they are put back; the calls
        that matter most are not refused there either."""
        done = subprocess.run(self.escape(), shell=True, cwd=self.workspace, capture_output=True, text=True, check=True)
        assert done.stdout.count("read canary") == 2 and not self.untouched(), done
        for canary in self.canaries:
            canary.write_text(CANARY)
        calls = subprocess.run([sys.executable, "calls.py"], cwd=self.workspace, capture_output=True, check=True)
        unconfined = json.loads(calls.stdout)
        assert all(unconfined[n] != 1 for n in ("name_to_handle_at", "open_by_handle_at", "fanotify_init",
                                                "sethostname", "syslog", "clone3")), unconfined  # fmt: skip


def upstream(place: Place, python: str = sys.executable, site: str = "") -> dict[str, Any]:
    """A stdio upstream that, at start-up, before any call, records its capabilities and tries the escape and the
    calls, then serves (run by `python`, with `site` on its PYTHONPATH)."""
    out, server = place.workspace, TESTS / "support" / "upstream_server.py"
    script = (f"cd {out}; {STATUS} > upstream-status.txt; {place.escape()} > upstream-escape.txt 2>&1; "
              f"python3 calls.py > upstream-calls.txt 2>&1; exec {python} {server}")  # fmt: skip
    paths = [site] if site else [sys.prefix, sys.base_prefix]
    return {"command": "/bin/sh", "args": ["-c", script], "readPaths": sorted({*paths, str(TESTS)}),
            "env": {"PYTHONPATH": site} if site else {}}  # fmt: skip


def assert_held(place: Place, status: str, escaped: str, calls: str) -> None:
    assert capabilities(status) == NO_CAPS, repr(status)
    assert escaped.count("refused") == 2 and "read" not in escaped, escaped
    assert place.untouched()
    refused = json.loads(calls)
    assert {k: v for k, v in refused.items() if k != "/dev/kmsg"} == REFUSED, refused
    assert refused["/dev/kmsg"] != 0, refused


@pytest.mark.parametrize("force", ["", "no-userns", "landlock-only", "preexec"])
async def test_a_root_servers_command_and_upstream_hold_no_capability_and_reach_no_canary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, force: str
) -> None:
    if force == "no-userns":  # a kernel that refuses user namespaces: bubblewrap as root without one
        found = bwrap.find()
        monkeypatch.setattr(bwrap, "find", lambda: dataclasses.replace(found, userns=False))
    elif force:
        monkeypatch.setenv(FORCE_ENV, force)
    place = Place(tmp_path, {"mcpServers": {"probe": {}}})
    place.control()
    (place.data_dir / "config.json").write_text(json.dumps({"mcpServers": {"probe": upstream(place)}}))
    hostname = socket.gethostname()
    config = ServeConfig.build(workspace=place.workspace, data_dir=place.data_dir, auto_sandboxed=True)
    seen: list[str] = []
    async with open_runtime(config) as rt:
        await upstreams_started(rt, "probe")
        async with client_for(rt, "legacy", elicitation_callback=answer("accept", {"approve": True}, seen)) as client:
            status, escaped, calls, named = [
                data(await client.call_tool("shell_run", {"command": command}))
                for command in (STATUS, place.escape(), "python3 calls.py", "hostname; dmesg 2>&1; echo $?")
            ]
            assert "echo: hi" in json.dumps((await client.call_tool("probe__echo", {"text": "hi"})).model_dump())
        state = {layer.name: layer for layer in layers.describe(rt.confinement)}
    assert state["capabilities"].in_force and state["syscalls"].in_force, state
    assert ("user namespace" in state["capabilities"].detail) == (force == ""), state["capabilities"]
    if force in ("", "no-userns"):
        assert seen == []  # the full sandbox: every command ran unasked
    assert_held(place, status["stdout"], escaped["stdout"], calls["stdout"])
    assert named["stdout"].splitlines()[0] == hostname == socket.gethostname()
    assert named["stdout"].splitlines()[-1] != "0", named  # dmesg failed
    files = [(place.workspace / f"upstream-{n}.txt").read_text() for n in ("status", "escape", "calls")]
    assert_held(place, *files)
    written = place.workspace / "upstream-status.txt"
    assert written.stat().st_uid == 0  # uid 0 inside is uid 0 outside: what commands write is the server's


def test_a_root_launcher_that_cannot_drop_its_bounding_set_never_runs_the_program(tmp_path: Path) -> None:
    """Without CAP_SETPCAP (here removed from its bounding set, so not regained at exec), a root launcher cannot
    drop the rest: it says so in one line and exits 126, and the program never runs."""
    from managed_tools.sandbox import launcher

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    try:
        built = [str(launcher.launcher(tmp_path / "cache"))]
    except launcher.LauncherError as exc:
        pytest.skip(str(exc))
    ruleset = landlock.build_ruleset(landlock.abi(), [], deny_tcp=True)
    try:
        for head in (built, list(launcher.interpreter().argv)):
            argv = [setpriv, "--bounding-set=-setpcap", *head, str(ruleset), "-", "0,0,0", "-", "/bin/touch",
                    "touch", str(tmp_path / "ran")]  # fmt: skip
            done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=(ruleset,), timeout=30)
            assert done.returncode == 126 and not (tmp_path / "ran").exists(), done
            assert done.stderr.count("\n") == 1 and "lacks CAP_SETPCAP" in done.stderr, done.stderr
    finally:
        os.close(ruleset)


# ---- without a C compiler --------------------------------------------------------------------------------------


@pytest.mark.parametrize("network", [False, True])
async def test_without_a_compiler_every_layer_holds_or_one_line_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, network: bool
) -> None:
    from managed_tools.sandbox import launcher

    monkeypatch.setattr(launcher, "COMPILER_PATH", str(tmp_path / "no-compiler-here"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing built before
    place = Place(tmp_path)
    place.control()
    config = ServeConfig.build(workspace=place.workspace, data_dir=place.data_dir, auto_sandboxed=True)
    async with open_runtime(config.model_copy(update={"shell_network": network})) as rt:
        c = rt.confinement
        assert c.launcher is not None and c.launcher.kind == "interpreter" and c.bwrap is not None
        assert layers.missing(layers.describe(c)) == []
        hint = launcher.install_hint()
        said = [*c.notices, layers.summary(layers.describe(c))]  # what start-up says of the sandbox
        # with the network on, the egress bridge is the one thing only a compiler builds: one line says so
        assert sum(hint in line for line in said) == (1 if network else 0), said
        async with client_for(rt, "legacy", elicitation_callback=YES) as client:
            status, escaped, calls = [
                data(await client.call_tool("shell_run", {"command": command}))
                for command in (STATUS, place.escape(), "python3 calls.py")
            ]
    assert_held(place, status["stdout"], escaped["stdout"], calls["stdout"])


def test_the_install_line_follows_the_system(tmp_path: Path) -> None:
    from managed_tools.sandbox.launcher import install_hint

    release = tmp_path / "os-release"
    for text, hint in (('ID=debian\n', "apt install gcc"), ('ID="alpine"\n', "apk add build-base"),
                       ('ID=rocky\nID_LIKE="rhel centos fedora"\n', "dnf install gcc")):  # fmt: skip
        release.write_text(text)
        assert install_hint(release) == hint


# ---- a non-root server --------------------------------------------------------------------------------------------


# The server's interpreter may live where an unprivileged uid cannot reach (pyenv under /root, 0700): it runs on the
# system's, with our venv's packages (the same Python version) on its path.
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
SITE = next(p for p in sys.path if p.endswith("site-packages"))
needs_setpriv = pytest.mark.skipif(
    shutil.which("setpriv") is None or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason=f"setpriv (util-linux) or {SYSTEM_PYTHON} is not installed",
)


@pytest.fixture
def nobody_place() -> Iterator[Place]:
    """A place an unprivileged uid owns (pytest's tmp_path is root's, 0700), outside it the root-owned canary."""
    root = Path(tempfile.mkdtemp(prefix="managed-tools-nobody-"))
    try:
        root.chmod(0o755)
        place = Place(root, {"mcpServers": {"probe": {}}})
        spec = upstream(place, SYSTEM_PYTHON, SITE)
        (place.data_dir / "config.json").write_text(json.dumps({"mcpServers": {"probe": spec}}))
        for path in (place.workspace, place.data_dir, *place.workspace.iterdir(), *place.data_dir.iterdir()):
            os.chown(path, NOBODY, NOBODY)
        for name in ("home", "cache", "state"):
            (root / name).mkdir()
            os.chown(root / name, NOBODY, NOBODY)
        yield place
    finally:
        shutil.rmtree(root, ignore_errors=True)


@asynccontextmanager
async def as_nobody(place: Place) -> AsyncIterator[Client]:
    root = place.workspace.parent
    # our venv's bin (rg), then the system's: not this root's PATH, whose dirs under /root the uid cannot read
    search = f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin"
    env = {"PATH": search, "HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "cache"),
           "XDG_STATE_HOME": str(root / "state"), "LANG": "C.UTF-8",
           "PYTHONPATH": os.pathsep.join([str(TESTS.parent), SITE])}  # fmt: skip
    serve = ["serve", "--workspace", str(place.workspace), "--data-dir", str(place.data_dir), "--auto-sandboxed"]
    args = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", SYSTEM_PYTHON, "-m", "managed_tools.server",
            *serve]  # fmt: skip
    params = StdioServerParameters(command=shutil.which("setpriv") or "setpriv", args=args, env=env, cwd=str(root))
    approves: Any = YES  # typed for the in-process clients' keyword arguments
    async with Client(params, mode="legacy", elicitation_callback=approves) as client:
        yield client


@needs_setpriv
async def test_a_non_root_servers_command_and_upstream_hold_no_capability_and_reach_no_canary(
    nobody_place: Place,
) -> None:
    place = nobody_place
    place.control()
    hostname = socket.gethostname()
    async with as_nobody(place) as client:
        described = data(await client.call_tool("environment_describe", {}))["confinement"]["layers"]
        status, escaped, calls = [
            data(await client.call_tool("shell_run", {"command": command}))
            for command in (STATUS, place.escape(), "python3 calls.py")
        ]
        for _ in range(300):  # the upstream starts in the background
            echoed = await client.call_tool("probe__echo", {"text": "hi"})
            if not echoed.is_error:
                break
            await anyio.sleep(0.1)
        assert not echoed.is_error, echoed
    state = {layer["name"]: layer for layer in described}
    assert state["capabilities"]["inForce"] and state["syscalls"]["inForce"], state
    assert_held(place, status["stdout"], escaped["stdout"], calls["stdout"])
    assert socket.gethostname() == hostname
    files = [(place.workspace / f"upstream-{n}.txt").read_text() for n in ("status", "escape", "calls")]
    assert_held(place, *files)
    assert (place.workspace / "upstream-status.txt").stat().st_uid == NOBODY


async def test_a_root_server_that_cannot_drop_capabilities_says_why_and_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root without CAP_SETPCAP and without bubblewrap: the capabilities layer is missing, in one line, so
    --auto-sandboxed asks and --require-confinement refuses (the launcher itself refuses to run the program)."""
    monkeypatch.setenv(FORCE_ENV, "landlock-only")
    monkeypatch.setattr(layers, "_effective_caps", lambda: ((1 << 41) - 1) & ~(1 << layers.CAP_SETPCAP))
    place = Place(tmp_path)
    config = ServeConfig.build(workspace=place.workspace, data_dir=place.data_dir, auto_sandboxed=True)
    async with open_runtime(config) as rt:
        state = {layer.name: layer for layer in layers.describe(rt.confinement)}
        gap = layers.shortfall(rt.confinement) or ""
    assert not state["capabilities"].in_force
    assert "without CAP_SETPCAP" in state["capabilities"].detail and "\n" not in state["capabilities"].detail
    assert "the capabilities layer is missing here (a root server without CAP_SETPCAP" in gap, gap
