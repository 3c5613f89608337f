"""The terminal views as a person sees them: each run in a real pseudo-terminal with colour on, at 80 and 160
columns, its screen read back with the colour codes taken out. The columns line up under their headings, no line
is wider than the window, a command's failure shows its command and exit status, and a long list pages only on a
terminal (a pipe gets it whole and plain)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from collections.abc import AsyncIterator

import anyio
import pytest
from conftest import Connect, data
from test_views_cli import Acted, acted  # noqa: F401  (the fixture this module's tests use)

from managed_tools.stores import approvals

pytestmark = pytest.mark.anyio

CODE = re.compile(r"\x1b\[[0-9;]*m")
WIDTHS = (80, 160)
BOILERPLATE = "Command, run once by /bin/bash in a new process:"
PAGED = "--paged--"


class Screenful:
    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.lines = [CODE.sub("", line) for line in raw.replace("\r\n", "\n").split("\n")]


def on_terminal(argv: list[str], columns: int, env: dict[str, str] | None = None) -> Screenful:
    """`managed-tools ARGV` with its output on a pseudo-terminal of `columns` x 40, colour allowed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PAGER", "LESS")}
    env = {**base, "TERM": "xterm-256color", "PAGER": f"sh -c 'echo {PAGED}; cat'", **(env or {})}
    command = [sys.executable, "-m", "managed_tools.server", *argv]
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env) as process:
        os.close(follower)
        out = b""
        while True:
            ready, _, _ = select.select([leader], [], [], 30)
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            out += chunk
        assert process.wait(30) == 0, out.decode(errors="replace")
    os.close(leader)
    return Screenful(out.decode())


def aligned(screen: Screenful, heading: str) -> list[str]:
    """The table's rows, each checked to start every column exactly where its heading starts."""
    at = next(i for i, line in enumerate(screen.lines) if line.startswith(heading))
    starts = [m.start() for m in re.finditer(r"\S+", screen.lines[at])]
    rows = []
    for line in screen.lines[at + 1 :]:
        if not line.strip() or line.startswith(("…", "`")):
            break
        for start in starts[1:]:
            if start < len(line):
                assert line[start - 1] == " " and line[start] != " ", (start, line, screen.lines[at])
        rows.append(line)
    assert rows
    return rows


def fits(screen: Screenful, columns: int) -> None:
    wide = [line for line in screen.lines if len(line) > columns]
    assert not wide, wide


@pytest.fixture
async def seen(acted: Acted, connect: Connect) -> AsyncIterator[Acted]:  # noqa: F811
    """The views' state, with a command that failed (exit 2) and a shell command waiting for approval."""
    async with connect(acted.runtime, session_id=acted.first) as client:
        failed = data(await client.call_tool("bash", {"command": "ls", "args": ["no-such-file"]}))
        assert failed["exitCode"] == 2
    async with acted.runtime.db.write() as tx:
        await approvals.create(
            tx, session_id=acted.first, wake_id=None, kind="tool_confirmation", tool_name="shell_run",
            arguments={"command": "make deploy --force"}, args_digest="1" * 64, channel="out_of_band",
            question=f"{BOILERPLATE}\n    make deploy --force",
        )  # fmt: skip
    yield acted


@pytest.mark.parametrize("columns", WIDTHS)
async def test_each_table_lines_up_in_colour_and_fits_the_window(seen: Acted, columns: int) -> None:
    views = {
        "sessions": "SESSION",
        "events": "SEQ",
        "memory": "TARGET",
        "outcomes": "SESSION",
        "approvals": "REQUEST",
    }
    for view, heading in views.items():
        screen = on_terminal([view, *seen.flags], columns)
        assert "\x1b[" in screen.raw, view  # colour is on
        fits(screen, columns)
        rows = aligned(screen, heading)
        if view == "sessions":
            assert any(seen.first.startswith(row.split()[0]) for row in rows)
            assert all(len(row.split()[0]) < 36 for row in rows)  # a short prefix, not the whole id
        if view == "approvals":
            assert BOILERPLATE not in "\n".join(rows) and "make deploy" in rows[0]
    for view in ("pending", "wakes"):
        fits(on_terminal([view, *seen.flags], columns), columns)


@pytest.mark.parametrize("columns", WIDTHS)
async def test_events_show_what_a_command_ran_and_call_its_exit_a_failure(seen: Acted, columns: int) -> None:
    screen = on_terminal(["events", "--session", seen.first, *seen.flags], columns)
    rows = aligned(screen, "SEQ")
    ended = [row for row in rows if "bash:" in row]
    assert ended and "failed (exit 2)" in ended[0] and "success" not in ended[0], rows
    if columns == 160:  # at 80 the summary is cut, with an ellipsis
        assert "ls no-such-file" in ended[0]
    else:
        assert ended[0].endswith("…") or "ls no-such-file" in ended[0]
    started = [row for row in rows if "bash started" in row]
    assert started and "ls" in started[0]
    assert "\x1b[31m" in screen.raw  # the failure in red


async def test_a_short_prefix_works_as_an_argument_and_an_ambiguous_one_says_so(seen: Acted) -> None:
    prefix = on_terminal(["sessions", *seen.flags], 80).lines
    shown = [line.split()[0] for line in prefix[1:] if line.strip() and not line.startswith("…")]
    named = on_terminal(["events", "--session", shown[-1], *seen.flags], 80)
    assert any(line.startswith("SEQ") for line in named.lines)
    both = seen.first[: next(i for i, (a, b) in enumerate(zip(seen.first, seen.second, strict=True)) if a != b)]
    assert len(both) >= 8  # UUIDv7 ids made in the same minute share their clock digits: that start names neither
    command = [sys.executable, "-m", "managed_tools.server", "events", "--session", both, *seen.flags]
    ran = await anyio.to_thread.run_sync(lambda: subprocess.run(command, capture_output=True, text=True, check=False))
    assert ran.returncode == 1 and "more than one session" in ran.stderr and "Traceback" not in ran.stderr


async def test_a_long_list_pages_on_a_terminal_and_not_through_a_pipe(seen: Acted) -> None:
    paged = on_terminal(["tools", *seen.flags], 80)
    assert paged.lines[0].strip() == PAGED
    fits(paged, 80)
    command = [sys.executable, "-m", "managed_tools.server", "tools", *seen.flags]
    env = {**os.environ, "PAGER": f"sh -c 'echo {PAGED}; cat'"}
    piped = await anyio.to_thread.run_sync(
        lambda: subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    )
    assert PAGED not in piped.stdout and "\x1b[" not in piped.stdout
    assert max(len(line) for line in piped.stdout.splitlines()) > 80  # whole, uncut
