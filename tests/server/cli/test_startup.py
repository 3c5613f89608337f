"""Start-up failures, as a person meets them: the real CLI in a subprocess, one line on stderr, a non-zero exit,
no traceback and no hang (a database thread left by a failed open used to keep the process alive for ever)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from managed_tools.server.cli.failures import failure
from managed_tools.stores.db import Database
from managed_tools.stores.errors import DatabaseOpenError

CLI = [sys.executable, "-m", "managed_tools.server"]
HANG = 60  # seconds: far above a start-up on a busy machine; a process still running then has hung


def start(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The CLI with stdin closed: a stdio server that did start would read EOF and exit 0 at once."""
    return subprocess.run(
        [*prefix, *CLI, *args], check=False, capture_output=True, text=True, timeout=HANG, stdin=subprocess.DEVNULL
    )


def one_line(out: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The failure as it must look: a non-zero status, one `managed-tools:` line holding `expected`."""
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("managed-tools: "), out.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def without_dac_override() -> tuple[str, ...]:
    """Root writes through file modes (CAP_DAC_OVERRIDE), so a read-only file or directory only refuses root once
    those capabilities are dropped: setpriv runs the command as root without them, the way a user runs it."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot be made to refuse root")
    return (setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner")


@pytest.fixture
def state_db(tmp_path: Path) -> Path:
    """A real, migrated state database in its own data dir."""
    path = tmp_path / "data" / "state.db"

    async def create() -> None:
        await (await Database.open(path)).close()

    anyio.run(create)
    return path


def where(workspace: Path, data_dir: Path) -> tuple[str, ...]:
    return ("--workspace", str(workspace), "--data-dir", str(data_dir))


def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(12).randbytes(8192))


def _text(path: Path) -> None:
    path.write_text("notes, not a database\n")


def _first_page(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:4096])  # the schema's first page, without the tables it points at


def _half(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("spoil", [_garbage, _text, _first_page, _half])
def test_a_corrupt_state_db_stops_the_server_with_one_line(
    spoil: Callable[[Path], None], state_db: Path, workspace: Path
) -> None:
    spoil(state_db)
    out = start("serve", *where(workspace, state_db.parent))
    one_line(out, f"The state database {state_db} is not a usable SQLite database", "move it aside")


@pytest.mark.parametrize(
    "command",
    [("serve", "--transport", "http", "--port", "0"), ("pending",), ("approve", "perm_1"), ("interrupt",)],
    ids=lambda c: c[0] + (" http" if "http" in c else ""),
)
def test_every_command_that_opens_the_state_says_the_same(
    command: tuple[str, ...], state_db: Path, workspace: Path
) -> None:
    _garbage(state_db)
    one_line(start(*command, *where(workspace, state_db.parent)), f"{state_db} is not a usable SQLite database")


def test_debug_shows_the_traceback_and_still_exits(state_db: Path, workspace: Path) -> None:
    _garbage(state_db)
    out = start("pending", *where(workspace, state_db.parent), "--log-level", "debug")
    assert out.returncode == 1 and "Traceback" in out.stderr and "sqlite3.DatabaseError" in out.stderr
    assert out.stderr.splitlines()[-1].startswith(f"managed-tools: The state database {state_db} is not a usable")


@pytest.mark.parametrize("command", ["serve", "pending"])
def test_a_read_only_state_db_is_refused_before_anything_runs(command: str, state_db: Path, workspace: Path) -> None:
    # SQLite opens such a file read-only without a word: the server started, then failed at its first write.
    state_db.chmod(0o444)
    out = start(command, *where(workspace, state_db.parent), prefix=without_dac_override())
    one_line(out, f"The state database file {state_db} is read-only", "make it writable")


@pytest.mark.parametrize("command", ["serve", "pending"])
def test_a_read_only_data_dir_is_refused(command: str, state_db: Path, workspace: Path) -> None:
    state_db.parent.chmod(0o555)  # the WAL and shared-memory files cannot be made beside the database
    try:
        out = start(command, *where(workspace, state_db.parent), prefix=without_dac_override())
    finally:
        state_db.parent.chmod(0o755)
    one_line(out, f"The state database {state_db} is read-only", "make both writable")


def test_a_new_state_db_in_an_unwritable_directory(tmp_path: Path, workspace: Path) -> None:
    data_dir = tmp_path / "locked"
    data_dir.mkdir(mode=0o555)
    out = start("serve", *where(workspace, data_dir), prefix=without_dac_override())
    one_line(out, f"Cannot open or create the state database {data_dir / 'state.db'}", "writable directory")


@pytest.mark.parametrize(
    ("data_dir", "expected"),
    [
        ("a-file", "The data dir {} is a file, not a directory"),
        ("a-file/state", "Cannot create the data dir {}: Not a directory"),
        ("/proc/managed-tools", "Cannot create the data dir {}: No such file or directory"),
        ("/proc/sys", "Cannot open or create the state database {}/state.db"),  # a directory no one can write in
        ("state-is-a-dir", "The state database {}/state.db is not a file"),
    ],
)
def test_an_unusable_data_dir(data_dir: str, expected: str, tmp_path: Path, workspace: Path) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "state-is-a-dir" / "state.db").mkdir(parents=True)
    path = tmp_path / data_dir
    one_line(start("serve", *where(workspace, path)), expected.format(path))


@pytest.mark.parametrize("command", ["serve", "tools"])
@pytest.mark.parametrize("workspace_name", ["absent", "a-file"])
def test_a_workspace_that_is_not_a_directory(command: str, workspace_name: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    path = tmp_path / workspace_name
    one_line(start(command, *where(path, tmp_path / "data")), f"The workspace {path} is not a directory")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{policy:", "config.json is not valid JSON in UTF-8: Expecting property name"),
        (b'\xff{"policy": {}}', "config.json is not valid JSON in UTF-8: 'utf-8' codec can't decode"),
        (b'{"customTools": 3}', "config.json is invalid at customTools: Input should be a valid list"),
        (b'{"policy": {"no_such_tool": "always_ask"}}', "policy names tools that do not exist: no_such_tool"),
        (None, "Cannot read {}: Is a directory"),
    ],
    ids=["not-json", "not-utf8", "wrong-type", "unknown-tool", "a-directory"],
)
def test_a_broken_config_json(content: bytes | None, expected: str, tmp_path: Path, workspace: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    config = data_dir / "config.json"
    config.mkdir() if content is None else config.write_bytes(content)
    one_line(start("serve", *where(workspace, data_dir)), expected.format(config))


def test_the_other_commands_read_config_json_the_same_way(tmp_path: Path, workspace: Path) -> None:
    """`tools` refuses a broken config.json as `serve` does; `pending` says so and goes on (a person can still answer
    while the file is being fixed: docs/cli.md), here to its own next line, since no server ever ran."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.json").write_bytes(b"\xff{}")
    broken = f"{data_dir / 'config.json'} is not valid JSON in UTF-8"
    one_line(start("tools", *where(workspace, data_dir)), broken)
    answered = start("pending", *where(workspace, data_dir))
    assert answered.returncode == 1 and "Traceback" not in answered.stderr
    said, then = answered.stderr.splitlines()
    assert said.startswith(f"managed-tools: {broken}") and said.endswith("It was passed over. Fix it before `serve`.")
    assert then.startswith("managed-tools: No state database")


def _non_daemon_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()}


def _left_behind(before: set[threading.Thread]) -> set[threading.Thread]:
    """Threads started since `before` still running after a moment: a closed connection's thread may be on its
    last line when close() returns; one left by a failed open never ends (and keeps the process alive)."""
    for thread in _non_daemon_threads() - before:
        thread.join(timeout=5)
    return _non_daemon_threads() - before


@pytest.mark.parametrize("spoil", [_garbage, _first_page])
def test_a_failed_open_leaves_no_thread_behind(spoil: Callable[[Path], None], state_db: Path) -> None:
    spoil(state_db)
    before = _non_daemon_threads()

    async def open_it() -> None:
        with pytest.raises(DatabaseOpenError, match="is not a usable SQLite database"):
            await Database.open(state_db)

    anyio.run(open_it)
    assert not _left_behind(before)


def test_a_failed_connect_leaves_no_thread_and_says_nothing_more(capfd: pytest.CaptureFixture[str]) -> None:
    # /proc/sys is a directory where no file can be made, by root either: the connect itself fails.
    before = _non_daemon_threads()

    async def open_it() -> None:
        with pytest.raises(DatabaseOpenError, match="Cannot open or create the state database"):
            await Database.open(Path("/proc/sys/state.db"))

    anyio.run(open_it)
    assert not _left_behind(before)
    assert capfd.readouterr().err == ""  # aiosqlite's thread used to report the closed event loop


def test_an_unexpected_failure_is_one_line_too() -> None:
    group = ExceptionGroup("unhandled errors in a TaskGroup", [RuntimeError("boom")])
    message, status = failure(group, "serve")
    assert status == 1 and message.startswith("serve stopped on an unexpected error: RuntimeError: boom")
    assert "--log-level debug" in message


def test_a_valid_config_json_starts(tmp_path: Path, workspace: Path) -> None:
    # The broken files' control: the same layout with a valid file starts, and stops at the end of stdin.
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.json").write_text(json.dumps({"policy": {"shell_run": "always_ask"}}))
    out = start("serve", *where(workspace, data_dir))
    assert out.returncode == 0 and out.stderr == "", out.stderr
