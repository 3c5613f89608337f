"""The read-only hand (`bash`) reads nothing outside its mount and shows nothing of the host: obsolete count
flags, `--files0-from`, the session's environment, `--color`, abbreviated flags and `bash env`, end to end through a
real MCP client.

A SECRET.txt sits next to the workspace (outside every mount); neither its content, nor the server's environment,
nor any host path may appear in any result, refusal included.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ERAS, Connect, data, error_text
from mcp import Client
from mcp_types import CallToolResult
from test_permissions import answer, client_for

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.shell.argv import FIXED_ENV

pytestmark = pytest.mark.anyio
SECRET = "SECRET-4f1c2a"
ENV_SECRET = "server-token-9d2e"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A root that ls, stat and wc quote in every style, so a host path could hide in escaped form."""
    root = tmp_path / 'my project\'s "work" \\ space'
    root.mkdir()
    return root


@pytest.fixture
async def rt(config: ServeConfig, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Runtime]:
    monkeypatch.setenv("MT_TEST_BEARER", ENV_SECRET)  # stands for the server's own HTTP token
    (workspace.parent / "SECRET.txt").write_text(f"{SECRET}\n")
    (workspace.parent / "list0").write_text("../SECRET.txt\0")
    (workspace / "list0").write_text("../SECRET.txt\0")
    (workspace / "hello.txt").write_text("hello\n")
    (workspace / "sub").mkdir()
    async with open_runtime(config) as runtime:
        yield runtime


class Calls:
    """Every result of a test, so one check can assert that nothing secret or host-shaped came back."""

    def __init__(self, client: Client, host: Path) -> None:
        self.client, self.host, self.texts = client, host, list[str]()

    async def __call__(self, tool: str, args: dict[str, Any]) -> CallToolResult:
        result = await self.client.call_tool(tool, args)
        self.texts.append(json.dumps([c.model_dump() for c in result.content]) + json.dumps(result.structured_content))
        return result

    async def bash(self, command: str, *args: str, cwd: str | None = None) -> CallToolResult:
        return await self(
            "bash", {"command": command, "args": list(args), **({"cwd": cwd} if cwd else {}), "timeoutMs": 3000}
        )

    def assert_clean(self) -> None:
        for text in self.texts:
            assert SECRET not in text and ENV_SECRET not in text and "SQLite format" not in text
            assert str(self.host) not in text, text  # no host path, the workspace's parent included


def _outside_targets(rt: Runtime, workspace: Path) -> list[str]:
    """SECRET.txt, the server's own environ (absolute and relative) and the state database, wherever it is."""
    environ = f"/proc/{os.getpid()}/environ"
    state_db = os.path.relpath(rt.environment.data_dir / "state.db", workspace)
    return ["../SECRET.txt", environ, os.path.relpath(environ, workspace), state_db]


@pytest.mark.parametrize("mode", ERAS)
async def test_obsolete_counts_read_nothing_outside(rt: Runtime, connect: Connect, workspace: Path, mode: str) -> None:
    async with connect(rt, mode) as client:
        calls = Calls(client, workspace.parent)
        for program in ("head", "tail"):
            for target in _outside_targets(rt, workspace):
                message = error_text(await calls.bash(program, "-999999c", target))
                assert "-9 (in '-999999c') is not an allowed flag" in message and "-c/--bytes=" in message
                refused = error_text(await calls.bash(program, "-c", "999999", "--", target))  # a valid spelling
                assert "outside" in refused or "data directory" in refused
        assert data(await calls.bash("head", "-c", "3", "hello.txt"))["stdout"] == "hel"
    calls.assert_clean()


@pytest.mark.parametrize("mode", ERAS)
async def test_files0_from_in_any_spelling_is_refused(
    rt: Runtime, connect: Connect, workspace: Path, mode: str
) -> None:
    async with connect(rt, mode) as client:
        calls = Calls(client, workspace.parent)
        for spelling in ("--files0=../list0", "--f=../list0", "--files0=list0", "--files0-from=list0"):
            message = error_text(await calls.bash("wc", spelling))
            assert "is not an allowed flag" in message and "-l/--lines" in message
        assert "use the full name" in error_text(await calls.bash("wc", "--f=list0"))
        counted = data(await calls.bash("wc", "-c", "list0"))  # the list itself is only a file to count
    assert counted["stdout"] == "14 /workspace/list0\n"
    calls.assert_clean()


@pytest.mark.parametrize("mode", ERAS)
async def test_session_env_cannot_change_parsing(rt: Runtime, workspace: Path, mode: str) -> None:
    async with client_for(rt, mode, elicitation_callback=answer("accept", {"approve": True})) as client:
        calls = Calls(client, workspace.parent)
        data(await calls("shell_set_env", {"key": "POSIXLY_CORRECT", "value": "1"}))
        data(await calls("shell_set_env", {"key": "GREETING", "value": "hidden-value-77"}))
        data(await calls("sandbox_execute", {"name": "mkdir", "input": {"path": "-x"}}))
        assert (workspace / "-x").is_dir()
        message = error_text(await calls.bash("cat", "hello.txt", "-x/../../SECRET.txt"))
        named = error_text(await calls.bash("cat", "hello.txt", "--", "-x/../../SECRET.txt"))  # a path: checked
        inside = data(await calls.bash("cat", "hello.txt", "--", "-x/../hello.txt"))
        env = data(await calls.bash("env"))
    assert "-x (in '-x/../../SECRET.txt') is not an allowed flag" in message and "./-name" in message
    assert "outside" in named
    assert inside["stdout"] == "hello\nhello\n"
    assert dict(line.split("=", 1) for line in env["stdout"].splitlines()) == FIXED_ENV  # not the session env
    assert "hidden-value-77" not in json.dumps(calls.texts)
    calls.assert_clean()


@pytest.mark.parametrize("mode", ERAS)
async def test_color_takes_no_next_argument(rt: Runtime, connect: Connect, workspace: Path, mode: str) -> None:
    async with connect(rt, mode) as client:
        calls = Calls(client, workspace.parent)
        outside = error_text(await calls.bash("ls", "--color", ".."))
        listed = data(await calls.bash("ls", "--color", "..", cwd="/workspace/sub"))  # .. is the workspace
        chosen = data(await calls.bash("ls", "--color=never", "-1"))
    assert "outside" in outside
    assert set(listed["stdout"].split()) == {"hello.txt", "list0", "sub"}
    assert "hello.txt" in chosen["stdout"]
    calls.assert_clean()


@pytest.mark.parametrize("mode", ERAS)
async def test_abbreviations_follow_and_recursion_are_refused_at_once(
    rt: Runtime, connect: Connect, workspace: Path, mode: str
) -> None:
    async with connect(rt, mode) as client:
        calls = Calls(client, workspace.parent)
        started = time.monotonic()
        rec = error_text(await calls.bash("ls", "--rec"))
        fo = error_text(await calls.bash("tail", "--fo", "hello.txt"))
        cf = error_text(await calls.bash("tail", "-cf", "hello.txt"))
        relative = error_text(await calls.bash("realpath", "--relative-t=/", "x"))
        took = time.monotonic() - started
    assert "use the full name" in rec and "-a/--all" in rec
    assert "use the full name" in fo and "-n/--lines=[+-]N" in fo
    assert "'f' is not a valid value for -c" in cf
    assert "use the full name" in relative and "--relative-to=PATH" in relative
    assert took < 2  # refused before anything ran: nothing followed until the timeout
    calls.assert_clean()


async def test_outputs_show_virtual_paths_only(rt: Runtime, connect: Connect, workspace: Path) -> None:
    async with connect(rt) as client:
        calls = Calls(client, workspace.parent)
        real = data(await calls.bash("realpath", "hello.txt", "sub"))
        relative = data(await calls.bash("realpath", "--relative-to=sub", "hello.txt"))
        stat = data(await calls.bash("stat", "hello.txt"))
        fmt = data(await calls.bash("stat", "-c", "%n %s", "hello.txt"))
        mount_point = error_text(await calls.bash("stat", "-c", "%m", "hello.txt"))
        listed = data(await calls.bash("ls", "-ld", "--quoting-style=shell-always", "sub"))
        for style in ("literal", "locale", "shell", "shell-escape-always", "c", "escape"):
            data(await calls.bash("ls", "-d", f"--quoting-style={style}", "sub"))
        data(await calls.bash("ls", "-db", "sub"))
        data(await calls.bash("stat", "-c", "%N", "sub"))
        headed = data(await calls.bash("head", "-v", "hello.txt"))
        pwd = data(await calls.bash("pwd", cwd="/workspace/sub"))
        missing = data(await calls.bash("cat", "nope.txt"))
    assert real["stdout"] == "/workspace/hello.txt\n/workspace/sub\n"
    assert relative["stdout"] == "../hello.txt\n"
    assert "File: /workspace/hello.txt" in stat["stdout"]
    assert fmt["stdout"] == "/workspace/hello.txt 6\n"
    assert "is not a valid value for -c" in mount_point
    assert listed["stdout"].rstrip().endswith("'/workspace/sub'")
    assert headed["stdout"].startswith("==> /workspace/hello.txt <==")
    assert pwd["stdout"] == "/workspace/sub\n"
    assert "/workspace/nope.txt" in missing["stderr"]
    calls.assert_clean()


async def test_grep_and_glob_ignore_the_servers_environment(
    rt: Runtime, connect: Connect, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rg runs with an empty env and --no-config: a RIPGREP_CONFIG_PATH in the server's env changes nothing."""
    config = workspace.parent / "rgrc"
    config.write_text("--glob=!*.txt\n--max-count=0\n")
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(config))
    async with connect(rt) as client:
        calls = Calls(client, workspace.parent)
        found = data(await calls("grep", {"query": "hello"}))
        globbed = data(await calls("glob", {"pattern": "*.txt"}))
    assert [hit["path"] for hit in found["hits"]] == ["/workspace/hello.txt"]
    assert globbed["matches"] == ["/workspace/hello.txt"]
    calls.assert_clean()


async def test_permissions_check_suggests_bash_only_for_allowed_spellings(rt: Runtime, connect: Connect) -> None:
    async def alternative(command: str) -> Any:
        checked = data(
            await client.call_tool("permissions_check", {"toolName": "shell_run", "toolArgs": {"command": command}})
        )
        return checked["readOnlyAlternative"]

    async with connect(rt) as client:
        follow = await alternative("tail -f hello.txt")
        abbreviated = await alternative("ls --rec")
        plain = await alternative("tail -n 3 hello.txt")
    assert follow is None and abbreviated is None
    assert plain["tool"] == "bash" and plain["args"]["args"] == ["-n", "3", "hello.txt"]
