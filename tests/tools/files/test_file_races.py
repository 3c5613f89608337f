"""Race-free file access (issue 10 item 4, F8, F11): a directory swapped for a symlink to the outside between the
guard's check and the open never leads out; FIFOs, sockets and symlink loops get a clear refusal at once."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from conftest import Connect, data, error_text
from mcp_types import CallToolResult

from managed_tools.sandbox import files, fsaccess
from managed_tools.sandbox.fsaccess import FileAccessError
from managed_tools.sandbox.mounts import Mount
from managed_tools.sandbox.paths import PathError, PathGuard, Resolved
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime

pytestmark = pytest.mark.anyio
SECRET = "TOP-SECRET-CONTENT-7f3a"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "SECRET.txt").write_text(SECRET + "\n")
    return folder


@pytest.fixture
def guard(workspace: Path) -> PathGuard:
    mount = Mount(
        kind="workspace", mount_path="/workspace", root=workspace, access="read_write", scope="user", prompt=""
    )
    return PathGuard([mount], [])


def make_dir(workspace: Path) -> Path:
    folder = workspace / "d"
    folder.mkdir()
    (folder / "SECRET.txt").write_text("harmless inside copy\n")
    return folder


def swap_to_link(folder: Path, outside: Path) -> None:
    folder.rename(folder.with_name("parked"))
    folder.symlink_to(outside, target_is_directory=True)


def untouched(outside: Path) -> bool:
    return sorted(os.listdir(outside)) == ["SECRET.txt"] and (outside / "SECRET.txt").read_text() == SECRET + "\n"


# ---- resolve, then swap, then open: every primitive refuses -------------------------------------------------------


def test_this_machine_uses_openat2() -> None:
    if platform.system() == "Linux" and platform.machine() in ("x86_64", "aarch64"):
        assert fsaccess.OPENAT2.available  # so the tests below exercise openat2; the walk is tested on its own


@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "walk"])
def test_open_beneath_refuses_a_link_swapped_in_after_the_check(
    guard: PathGuard, workspace: Path, outside: Path, walk: bool
) -> None:
    folder = make_dir(workspace)
    resolved = guard.resolve("d/SECRET.txt", "read")
    with fsaccess.opened(fsaccess.open_beneath(resolved.root, resolved.real, os.O_RDONLY, walk=walk)) as fd:
        assert os.read(fd, 100) == b"harmless inside copy\n"  # before the swap it opens
    swap_to_link(folder, outside)
    with pytest.raises(OSError) as caught:
        fsaccess.open_beneath(resolved.root, resolved.real, os.O_RDONLY, walk=walk)
    assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)
    (workspace / "x").symlink_to(outside / "SECRET.txt")  # a link as the last component is refused too
    with pytest.raises(OSError):
        fsaccess.open_beneath(resolved.root, "x", os.O_RDONLY, walk=walk)


PRIMITIVES: dict[str, tuple[str, str, Callable[[Resolved], object]]] = {
    "read": ("d/SECRET.txt", "read", lambda r: files.read_limited(r, 1000)),
    "sha256": ("d/SECRET.txt", "read", files.sha256_file),
    "write": ("d/new.txt", "write", lambda r: files.atomic_write(r, b"planted")),
    "write-deep": ("d/a/b/new.txt", "write", lambda r: files.atomic_write(r, b"planted")),
    "replace": ("d/SECRET.txt", "modify", lambda r: files.atomic_write(r, b"planted")),
    "mkdir": ("d/made", "write", files.make_dirs),
    "list": ("d", "list", files.list_dir),
    "stat": ("d/SECRET.txt", "list", files.lstat),
}


@pytest.mark.parametrize("name", list(PRIMITIVES))
def test_every_primitive_refuses_a_swap_between_check_and_use(
    guard: PathGuard, workspace: Path, outside: Path, name: str
) -> None:
    path, access, use = PRIMITIVES[name]
    folder = make_dir(workspace)
    resolved = guard.resolve(path, access)  # type: ignore[arg-type]
    swap_to_link(folder, outside)
    with pytest.raises(FileAccessError) as caught:
        use(resolved)
    message = str(caught.value)
    assert message.startswith(f"/workspace/{path}: ")
    assert "symbolic link is in the way" in message or "not a directory" in message
    assert str(workspace) not in message and SECRET not in message
    assert untouched(outside)


# ---- the real race, through the MCP client ------------------------------------------------------------------------


LIBC = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2


class Swapper(threading.Thread):
    """Keeps exchanging /workspace/d (a directory) with a symlink to the outside, atomically (renameat2
    RENAME_EXCHANGE), so `d` is always there: one moment a directory, the next a link out, until stopped."""

    def __init__(self, workspace: Path, outside: Path) -> None:
        super().__init__(daemon=True)
        self.names = (os.fsencode(workspace / "d"), os.fsencode(workspace / "d_link"))
        (workspace / "d_link").symlink_to(outside, target_is_directory=True)
        self.stop = threading.Event()
        self.swaps = 0

    def run(self) -> None:
        while not self.stop.is_set():
            if LIBC.renameat2(AT_FDCWD, self.names[0], AT_FDCWD, self.names[1], RENAME_EXCHANGE) != 0:
                raise OSError(ctypes.get_errno(), "renameat2")
            self.swaps += 1
            time.sleep(0.0002 * (self.swaps % 3))

    def __enter__(self) -> Swapper:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.join()
        if self.swaps % 2:  # leave `d` a directory again
            LIBC.renameat2(AT_FDCWD, self.names[0], AT_FDCWD, self.names[1], RENAME_EXCHANGE)


RACED: list[tuple[str, dict[str, Any]]] = [
    ("read", {"path": "d/SECRET.txt"}),
    ("write", {"path": "d/planted.txt", "content": "planted"}),
    ("write", {"path": "d/SECRET.txt", "content": "planted"}),
    ("edit", {"path": "d/SECRET.txt", "oldText": "e", "newText": "e"}),
    ("sandbox_execute", {"name": "append_text", "input": {"path": "d/SECRET.txt", "content": ""}}),
    ("sandbox_execute", {"name": "list_dir", "input": {"path": "d"}}),
    ("sandbox_execute", {"name": "stat", "input": {"path": "d/SECRET.txt"}}),
    ("sandbox_execute", {"name": "mkdir", "input": {"path": "d/made"}}),
    ("resources_stage_from_substrate", {"sourcePath": "SOUL.md", "targetPath": "d/SOUL.md", "overwrite": True}),
]


def shown(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content) + repr(result.structured_content)


@pytest.mark.skipif(platform.system() != "Linux", reason="the swapper uses renameat2(RENAME_EXCHANGE)")
async def test_a_local_process_swapping_a_directory_never_leads_out(
    config: ServeConfig, connect: Connect, workspace: Path, outside: Path
) -> None:
    make_dir(workspace)
    async with open_runtime(config) as runtime:
        soul = next(m.root for m in runtime.guard.mounts if m.kind == "agent_substrate") / "SOUL.md"
        soul.write_text("soul\n")
        async with connect(runtime) as client:
            results: list[CallToolResult] = []
            with Swapper(workspace, outside) as swapper:
                deadline = time.monotonic() + 6
                while time.monotonic() < deadline and len(results) < 100 * len(RACED):
                    for tool, args in RACED:
                        results.append(await client.call_tool(tool, args))
    assert swapper.swaps > 100, swapper.swaps
    assert untouched(outside)  # the old code left temporary files (and more) outside on every run
    assert all(SECRET not in shown(r) for r in results)
    assert not any("failed unexpectedly" in shown(r) for r in results)  # refusals are clear, never internal
    assert sum(not r.is_error for r in results) > len(results) // 10  # the tools kept working between swaps


# ---- non-regular files: refused at once, no reader left behind ----------------------------------------------------


@pytest.fixture
def fifo(workspace: Path) -> Iterator[Path]:
    path = workspace / "pipe"
    os.mkfifo(path)
    yield path


def nobody_reads(path: Path) -> bool:
    """True if no one holds the FIFO open for reading (an open for writing without blocking says ENXIO)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        return exc.errno == errno.ENXIO
    return False


class Unblocker(threading.Thread):
    """The old code blocked in open() forever; after 3 s this opens the FIFO for writing whenever a reader waits,
    so such a test fails on its timing instead of hanging."""

    def __init__(self, fifo: Path) -> None:
        super().__init__(daemon=True)
        self.fifo = fifo
        self.stop = threading.Event()

    def run(self) -> None:
        self.stop.wait(3)
        while not self.stop.wait(0.05):
            with suppress(OSError):
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))

    def __enter__(self) -> Unblocker:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.join()


FIFO_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("read", {"path": "pipe"}, "named pipe (FIFO)"),
    ("edit", {"path": "pipe", "oldText": "a", "newText": "b"}, "named pipe (FIFO)"),
    ("sandbox_execute", {"name": "read_text", "input": {"path": "pipe"}}, "named pipe (FIFO)"),
    ("sandbox_execute", {"name": "append_text", "input": {"path": "pipe", "content": "x"}}, "named pipe (FIFO)"),
    ("grep", {"path": "pipe", "query": "x"}, "named pipe (FIFO)"),
    ("resources_compare_with_substrate", {"sessionPath": "pipe", "substratePath": "SOUL.md"}, "named pipe (FIFO)"),
]


@pytest.mark.parametrize(
    ("tool", "args", "expected"), FIFO_CALLS, ids=[c[0] + str(i) for i, c in enumerate(FIFO_CALLS)]
)
async def test_a_fifo_is_refused_at_once_and_no_reader_is_left(  # noqa: PLR0917 (fixtures and parameters)
    config: ServeConfig, connect: Connect, fifo: Path, tool: str, args: dict[str, Any], expected: str
) -> None:
    async with open_runtime(config) as runtime, connect(runtime) as client:
        with Unblocker(fifo):
            started = time.monotonic()
            result = await client.call_tool(tool, args)
            elapsed = time.monotonic() - started
    assert elapsed < 1, elapsed
    assert expected in error_text(result) and "/workspace/pipe" in error_text(result)
    assert nobody_reads(fifo)


async def test_a_socket_and_a_link_loop_get_a_clear_refusal(
    config: ServeConfig, connect: Connect, workspace: Path
) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(workspace / "sock"))
    (workspace / "loop_a").symlink_to("loop_b")
    (workspace / "loop_b").symlink_to("loop_a")
    (workspace / "self").symlink_to("self")
    calls: list[tuple[str, dict[str, Any], str]] = [
        ("read", {"path": "sock"}, "/workspace/sock: it is a socket or a device, not a regular file"),
        ("read", {"path": "loop_a"}, "/workspace/loop_a goes through a loop of symbolic links"),
        ("read", {"path": "self/x"}, "/workspace/self/x goes through a loop of symbolic links"),
        ("write", {"path": "loop_b", "content": "x"}, "/workspace/loop_b goes through a loop"),
        ("write", {"path": "self/new.txt", "content": "x"}, "/workspace/self/new.txt goes through a loop"),
        ("edit", {"path": "self", "oldText": "a", "newText": "b"}, "/workspace/self goes through a loop"),
        ("glob", {"path": "loop_a", "pattern": "*"}, "/workspace/loop_a goes through a loop"),
        ("grep", {"path": "self", "query": "x"}, "/workspace/self goes through a loop"),
        ("sandbox_execute", {"name": "stat", "input": {"path": "loop_a"}}, "/workspace/loop_a goes through a loop"),
        ("sandbox_execute", {"name": "mkdir", "input": {"path": "self/d"}}, "/workspace/self/d goes through a loop"),
        ("write", {"path": "a" * 300, "content": "x"}, "a name in it is too long"),
    ]
    try:
        async with open_runtime(config) as runtime, connect(runtime) as client:
            results = [(await client.call_tool(tool, args), expected) for tool, args, expected in calls]
    finally:
        server.close()
    for result, expected in results:
        assert expected in error_text(result)
        assert str(workspace) not in error_text(result)
        assert result.meta is not None and result.meta["managed-tools/error"]["kind"] == "tool_error"


def test_a_loop_is_refused_by_the_guard_itself(guard: PathGuard, workspace: Path) -> None:
    (workspace / "self").symlink_to("self")
    with pytest.raises(PathError, match="/workspace/self goes through a loop of symbolic links"):
        guard.resolve("self", "read")


def test_a_link_swapped_while_the_guard_resolves_is_refused_clearly(
    guard: PathGuard, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the swap test found: the strict pass sees a link vanish (ENOENT), the second pass finds a directory
    where the link was (readlink: EINVAL). Both passes' errors end in one refusal naming the virtual path."""
    (workspace / "d").symlink_to("missing")
    calls: list[str] = []

    def readlink(path: Any, *args: Any, **kwargs: Any) -> str:
        calls.append(str(path))
        raise OSError(errno.ENOENT if len(calls) == 1 else errno.EINVAL, os.strerror(errno.EINVAL), str(path))

    monkeypatch.setattr(os, "readlink", readlink)
    with pytest.raises(PathError, match=r"^/workspace/d/x cannot be resolved \(Invalid argument\); refused\.$"):
        guard.resolve("d/x", "read")
    assert len(calls) == 2


# ---- what keeps working -------------------------------------------------------------------------------------------


async def test_links_inside_the_mount_still_work(config: ServeConfig, connect: Connect, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.txt").write_text("alpha\n")
    (workspace / "rel").symlink_to("src/a.txt")
    (workspace / "abs").symlink_to(workspace / "src" / "a.txt")  # absolute, but inside the mount
    (workspace / "dirlink").symlink_to(workspace / "src", target_is_directory=True)
    async with open_runtime(config) as runtime, connect(runtime) as client:
        relative = data(await client.call_tool("read", {"path": "rel"}))
        absolute = data(await client.call_tool("read", {"path": "abs"}))
        through = data(await client.call_tool("read", {"path": "dirlink/a.txt"}))
        edited = data(await client.call_tool("edit", {"path": "abs", "oldText": "alpha", "newText": "beta"}))
        listed = data(await client.call_tool("sandbox_execute", {"name": "list_dir", "input": {"path": "dirlink"}}))
        created = data(await client.call_tool("write", {"path": "dirlink/b.txt", "content": "bee"}))
        replaced = data(await client.call_tool("write", {"path": "rel", "content": "own file"}))
    assert relative["content"] == absolute["content"] == through["content"] == "alpha\n"
    assert edited["replacements"] == 1 and (workspace / "src" / "a.txt").read_text() == "beta\n"  # the real file
    assert [e["name"] for e in listed["output"]["entries"]] == ["a.txt"]
    assert created["created"] is True and (workspace / "src" / "b.txt").read_text() == "bee"
    assert replaced["created"] is False and not (workspace / "rel").is_symlink()  # write replaces the link
    assert (workspace / "src" / "a.txt").read_text() == "beta\n"
