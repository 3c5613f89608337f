"""The shell hand end to end: real processes, real SQLite, a real mcp.Client in both eras.

`bash` is attacked with every known way around a command filter; the writable shells never run without a
person's approval of the exact command; long, flooding and forking commands are bounded and cleaned up.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import ERAS, Connect, data, error_text, gone
from mcp import Client
from mcp_types import RequestParamsMeta
from test_permissions import answer, client_for

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.shell import posture as shell_core
from managed_tools.tools.shell.argv import FIXED_ENV

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]
YES = answer("accept", {"approve": True})


@pytest.fixture
def config(workspace: Path, tmp_path: Path, database_option: str | None) -> ServeConfig:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "secret.txt").write_text("vault secret\n")
    return ServeConfig.build(workspace=workspace, data_dir=None, vaults={"docs": vault}, database=database_option)


@pytest.fixture
async def rt(config: ServeConfig, workspace: Path) -> AsyncIterator[Runtime]:
    (workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "a.txt").write_text("alpha\n")
    async with open_runtime(config) as runtime:
        yield runtime


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return data(await client.call_tool(tool, args))


async def refused(client: Client, tool: str, args: dict[str, Any]) -> str:
    return error_text(await client.call_tool(tool, args))


# ---- bash ------------------------------------------------------------------------------------------------------


@pytest.mark.sqlite_only(reason="processes and the argv filter; no store path")
@pytest.mark.parametrize("mode", ERAS)
async def test_bash_runs_allowlisted_programs_without_a_shell(rt: Runtime, connect: Connect, mode: str) -> None:
    async with connect(rt, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["bash"].annotations is not None and tools["bash"].annotations.read_only_hint is True
        listed = await call(client, "bash", {"command": "ls", "args": ["-1"]})
        head = await call(client, "bash", {"command": "head", "args": ["-n", "2", "notes.txt"]})
        wc = await call(client, "bash", {"command": "wc", "args": ["-l", "/workspace/notes.txt"]})
        pwd = await call(client, "bash", {"command": "pwd", "cwd": "/workspace/sub"})
        cat = await call(client, "bash", {"command": "cat", "args": ["../notes.txt"], "cwd": "sub"})
        env = await call(client, "bash", {"command": "env"})
    assert listed["ok"] and {"notes.txt", "sub"} <= set(listed["stdout"].split())
    assert head["stdout"] == "one\ntwo\n" and head["exitCode"] == 0 and head["kind"] == "bash"
    assert wc["stdout"].split()[0] == "3" and "/workspace/notes.txt" in wc["stdout"]  # host path shown virtual
    assert pwd["stdout"] == "/workspace/sub\n"
    assert cat["stdout"] == "one\ntwo\nthree\n"
    assert dict(line.split("=", 1) for line in env["stdout"].splitlines()) == FIXED_ENV  # the whole env, fixed


ATTACKS: list[tuple[str, list[str], str | None]] = [
    ("sh", ["-c", "id"], "bash runs only these programs"),
    ("/bin/rm", ["-rf", "/"], "bash runs only these programs"),
    ("ls;id", [], "bash runs only these programs"),
    ("ls $(id)", [], "bash runs only these programs"),
    ("ls\nid", [], "bash runs only these programs"),
    ("'ls'", [], "bash runs only these programs"),
    ("env", ["sh", "-c", "id"], "takes no arguments"),
    ("env", ["LD_PRELOAD=/tmp/x.so", "ls"], "takes no arguments"),
    ("cat", ["/etc/passwd"], "outside the mounts"),
    ("cat", ["../../../etc/passwd"], "outside the mounts"),
    ("cat", ["$(id)"], None),  # one literal file name that does not exist: ls/cat report it, nothing runs
    ("cat", ["notes.txt; id"], None),
    ("cat", ["notes.txt && id"], None),
    ("cat", ["notes.txt | id"], None),
    ("cat", ["`id`"], None),
    ("cat", ["<(id)"], None),
    ("cat", ["notes.txt > owned"], None),
    ("tail", ["-f", "notes.txt"], "is not an allowed flag"),
    ("ls", ["-R"], "is not an allowed flag"),
    ("ls", ["-laR"], "is not an allowed flag"),
    ("wc", ["--files0-from=notes.txt"], "is not an allowed flag"),
    ("realpath", ["--relative-to=/etc", "notes.txt"], "outside the mounts"),
    ("cat", ["agent/SOUL.md"], "escapes the mounted root"),
    ("cat", ["/vaults/docs/secret.txt"], "vault"),
    ("cat", ["link-out/passwd"], "outside /workspace"),
    ("cat", ["link-out/../notes.txt"], None),  # folded lexically: the workspace file, never /etc/../notes.txt
    ("cat", [".managed-tools/state.db"], "data directory"),
    ("head", ["-n"], "needs a value"),
]


@pytest.mark.sqlite_only(reason="processes and the argv filter; no store path")
async def test_bash_refuses_every_way_around_the_filter(rt: Runtime, connect: Connect, workspace: Path) -> None:
    (workspace / "link-out").symlink_to("/etc")
    async with connect(rt) as client:
        for command, args, expected in ATTACKS:
            result = await client.call_tool("bash", {"command": command, "args": args})
            if expected is None:  # the metacharacters stayed inside one argument: at most "no such file"
                out = data(result)
                assert "uid=" not in out["stdout"] + out["stderr"], (command, args)
                if args[0] != "link-out/../notes.txt":
                    assert out["exitCode"] != 0 and "No such file" in out["stderr"], (command, args, out)
            else:
                assert expected in error_text(result), (command, args, error_text(result))
        # environment injection through the session env is refused at the door
        for key in ("LD_PRELOAD", "PATH", "MANAGED_TOOLS_SESSION_ID", "GCONV_PATH", "BASH_ENV", "1BAD"):
            assert "Env key" in await refused(client, "shell_set_env", {"key": key, "value": "x"})
    assert not (workspace / "owned").exists()
    assert sorted(os.listdir(workspace)) == ["link-out", "notes.txt", "sub"]


@pytest.mark.sqlite_only(reason="processes and the argv filter; no store path")
async def test_bash_in_a_vault_only_lists(rt: Runtime, connect: Connect) -> None:
    async with connect(rt) as client:
        listed = await call(client, "bash", {"command": "ls", "cwd": "/vaults/docs"})
        where = await call(client, "bash", {"command": "pwd", "cwd": "/vaults/docs"})
        cat = await refused(client, "bash", {"command": "cat", "args": ["secret.txt"], "cwd": "/vaults/docs"})
    assert listed["stdout"] == "secret.txt\n" and where["stdout"] == "/vaults/docs\n"
    assert "vault" in cat


@pytest.mark.sqlite_only(reason="processes and the argv filter; no store path")
async def test_bash_timeout_and_output_cap(rt: Runtime, connect: Connect, workspace: Path) -> None:
    (workspace / "sparse").touch()
    os.truncate(workspace / "sparse", 1 << 40)  # a terabyte of holes: counting its lines outlasts the 300 ms
    (workspace / "big.txt").write_text("x" * 50_000)
    async with connect(rt) as client:
        started = time.monotonic()
        hung = await call(client, "bash", {"command": "wc", "args": ["-l", "sparse"], "timeoutMs": 300})
        took = time.monotonic() - started
        big = await call(client, "bash", {"command": "cat", "args": ["big.txt"], "maxOutputChars": 1000})
    assert hung["status"] == "timed_out" and hung["timedOut"] and hung["exitCode"] is None and took < 3
    assert (
        big["truncated"] and big["stdout"].startswith("x" * 1000) and "output truncated: 50000 bytes" in big["stdout"]
    )
    assert len(big["stdout"]) < 1100


# ---- shell_run: approval, cwd, long commands, cleanup ----------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_shell_run_needs_approval_of_the_exact_command(rt: Runtime, workspace: Path, mode: str) -> None:
    seen: list[str] = []
    command = "echo made > made.txt && echo done"
    async with client_for(rt, mode, elicitation_callback=answer("accept", {"approve": True}, seen)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["shell_run"].annotations is not None and tools["shell_run"].annotations.destructive_hint
        ran = await call(client, "shell_run", {"command": command, "cwd": "sub"})
    assert ran["ok"] and ran["stdout"] == "done\n" and ran["kind"] == "shell" and ran["cwd"] == "/workspace/sub"
    assert (workspace / "sub" / "made.txt").read_text() == "made\n"
    assert command in seen[0] and "Working directory: /workspace/sub" in seen[0]
    assert str(workspace) not in seen[0]  # no host path in the question
    async with client_for(rt, mode, elicitation_callback=answer("decline")) as client:
        denied = await refused(client, "shell_run", {"command": "touch nope"})
    async with client_for(rt, mode) as client:  # no elicitation: fail closed
        pending = await refused(client, "shell_run", {"command": "touch nope"})
    assert "denied confirmation for shell_run" in denied and "managed-tools approve" in pending
    assert not (workspace / "nope").exists()


@pytest.mark.parametrize("mode", ERAS)
async def test_shell_run_carries_its_output_once_and_says_whether_it_mapped_virtual_paths(
    rt: Runtime, workspace: Path, mode: str
) -> None:
    """Issue 38, item 8: stdout and stderr, no `text` repeating both; `rewroteVirtualPaths` as the reference's."""
    (workspace / "sub" / "notes.txt").write_text("from the workspace\n")
    async with client_for(rt, mode, elicitation_callback=YES) as client:
        mapped = await call(client, "shell_run", {"command": "cat /workspace/sub/notes.txt; echo oops >&2"})
        plain = await call(client, "shell_run", {"command": "echo plain"})
    assert (mapped["stdout"], mapped["stderr"]) == ("from the workspace\n", "oops\n") and "text" not in mapped
    assert mapped["rewroteVirtualPaths"] is True and plain["rewroteVirtualPaths"] is False
    assert plain["stdout"] == "plain\n"


async def test_shell_run_refuses_cwd_outside_a_writable_mount(rt: Runtime) -> None:
    async with client_for(rt, elicitation_callback=YES) as client:
        for cwd in ("/workspace/agent", "/vaults/docs", "/etc", "../.."):
            assert "cwd" in await refused(client, "shell_run", {"command": "true", "cwd": cwd})


async def test_long_command_returns_a_handle_and_shell_wait_follows_it(rt: Runtime) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with client_for(rt, "legacy", elicitation_callback=YES) as client:
        first = data(
            await client.call_tool(
                "shell_run",
                # Sleeps long enough that the three calls below still find it running on a loaded machine.
                {"command": "echo start; sleep 4; echo end", "waitMs": 1200},
                progress_callback=on_progress,
            )
        )
        assert first["status"] == "running" and first["nextStep"]["tool"] == "shell_wait"
        assert first["stdout"] == "start\n"
        await call(client, "outcome_define", {"title": "t", "successCriteria": []})
        snapshot = await call(client, "session_get_snapshot", {})
        assert snapshot["shellState"]["busy"] is True
        evaluation = await call(client, "outcome_evaluate", {})
        cid = first["commandId"]
        waited = await call(client, "shell_wait", {"commandId": cid, "timeoutMs": 15000})
        read = await call(client, "shell_read_command", {"commandId": cid})
    assert seen, "a client that sent a progress token gets progress while the command runs"
    assert evaluation["evaluation"]["status"] == "not_ready"
    assert evaluation["evaluation"]["nextSuggestedTool"]["tool"] == "shell_wait"
    assert waited["state"] == "completed" and waited["command"]["stdout"] == "start\nend\n"
    assert read["status"] == "completed" and read["exitCode"] == 0 and read["commandId"] == cid


@pytest.mark.sqlite_only(reason="processes and the argv filter; no store path")
async def test_forks_and_floods_are_bounded_and_cleaned_up(rt: Runtime, workspace: Path) -> None:
    async with client_for(rt, elicitation_callback=YES) as client:
        forked = await call(client, "shell_run", {"command": "sleep 30.125 & echo parent"})
        flood = await call(client, "shell_run", {"command": "yes", "timeoutMs": 500, "maxOutputChars": 500})
    assert forked["stdout"] == "parent\n"
    assert await gone("30.125"), "a background child of a finished command is killed with its group"
    assert flood["timedOut"] and flood["truncated"] and len(flood["stdout"]) < 600


@pytest.mark.sqlite_only(reason="processes and the argv filter; no store path")
async def test_cancelling_a_call_kills_the_process_group(rt: Runtime, workspace: Path) -> None:
    async with client_for(rt, "legacy", elicitation_callback=YES) as client:
        with anyio.move_on_after(1.0) as scope:
            await client.call_tool("shell_run", {"command": "sleep 20.125 & sleep 20"})
        assert scope.cancelled_caught
        await anyio.sleep(0.5)
        history = await call(client, "shell_history", {"limit": 1})
    assert await gone("20.125")
    assert history["commands"][0]["status"] == "killed"


# ---- the persistent shell --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_persistent_shell_lifecycle(rt: Runtime, config: ServeConfig, mode: str) -> None:
    seen: list[str] = []
    async with client_for(rt, mode, elicitation_callback=answer("accept", {"approve": True}, seen)) as client:
        before = await call(client, "shell_describe", {})
        assert before["persistentShell"] is None and before["recoveryPlan"]["tool"] == "shell_open"
        opened = await call(client, "shell_open", {})
        shell = opened["persistentShell"]
        assert shell["status"] == "active" and opened["changed"] == "opened" and len(shell["shellId"]) == 16
        env_set = await call(client, "shell_set_env", {"key": "GREETING", "value": "hello there"})
        # A setter answers with what it changed (issue 38, item 15): not the whole posture shell_describe shows.
        assert env_set["changed"] == "GREETING set" and env_set["envKeys"] == ["GREETING"]
        assert set(env_set) == {"changed", "cwd", "envKeys", "persistentShell"} and "hello there" not in str(env_set)
        first = await call(client, "shell_exec", {"command": "cd sub && export COLOR=blue && pwd"})
        second = await call(client, "shell_exec", {"command": 'echo "$COLOR $GREETING"; pwd'})
        syntax = await call(client, "shell_exec", {"command": 'echo "unclosed'})
        third = await call(client, "shell_exec", {"command": "echo still here"})
        described = await call(client, "shell_describe", {})
        env_view = json.dumps({k: v for k, v in described.items() if not k.endswith(("Commands", "Command"))})
        pid = shell_core.live_shell(rt, described["sessionId"])
        assert pid is not None
        os.killpg(pid.proc.pid, signal.SIGKILL)  # killed outside the server
        await anyio.sleep(0.3)
        gone = await call(client, "shell_describe", {})
        restarted = await call(client, "shell_restart", {})
        after = await call(client, "shell_exec", {"command": 'echo "$GREETING"; pwd'})
        history = await call(client, "shell_history", {"limit": 10})
        last = await call(client, "shell_read_last_output", {})
        memory = await call(client, "memory_read", {"target": "shell_state"})
    assert first["stdout"] == "/workspace/sub\n" and first["kind"] == "persistent-shell"
    assert second["stdout"] == "blue hello there\n/workspace/sub\n"
    assert syntax["exitCode"] == 2 and third["stdout"] == "still here\n"  # a syntax error does not end the shell
    assert described["cwd"] == "/workspace/sub" and "COLOR" in described["persistentShell"]["envKeys"]
    assert "hello there" not in env_view and "blue" not in env_view  # keys only, never values
    assert gone["persistentShell"]["status"] == "closed" and gone["recoveryPlan"]["tool"] == "shell_restart"
    assert restarted["persistentShell"]["status"] == "active" and restarted["changed"] == "opened"  # it was dead
    assert restarted["persistentShell"]["shellId"] != shell["shellId"]
    assert after["stdout"] == "hello there\n/workspace/sub\n"  # durable cwd and shell_set_env env come back
    assert [c["kind"] for c in history["commands"]] == ["persistent-shell"] * 5
    assert last["lastCommand"]["commandId"] == after["commandId"]
    assert json.loads(memory["content"])["shellState"]["envKeys"] == ["GREETING"]
    assert all("persistent shell" in message for message in seen) and "cd sub && export COLOR=blue" in seen[0]


async def test_a_new_process_reports_the_shell_closed_and_reads_its_history(
    config: ServeConfig, workspace: Path
) -> None:
    async with open_runtime(config) as first, client_for(first, elicitation_callback=YES) as client:
        await call(client, "shell_exec", {"command": "echo from the first process"})
        session = (await call(client, "shell_describe", {}))["sessionId"]
    async with open_runtime(config) as second, client_for(second, session_id=session) as client:
        described = await call(client, "shell_describe", {})
        history = await call(client, "shell_history", {})
    assert described["persistentShell"]["status"] == "closed" and not described["persistentShell"]["live"]
    assert described["recoveryPlan"]["tool"] == "shell_restart"
    assert history["commands"][0]["stdoutPreview"] == "from the first process\n"


async def test_busy_shell_refuses_a_second_command_before_asking(rt: Runtime, workspace: Path) -> None:
    seen: list[str] = []
    # Busy until the test says so, not for a fixed time a loaded machine may outlast before the next call.
    command = "while [ ! -e go ]; do sleep 0.05; done; echo late"
    async with client_for(rt, elicitation_callback=answer("accept", {"approve": True}, seen)) as client:
        running = await call(client, "shell_exec", {"command": command, "waitMs": 200})
        busy = await refused(client, "shell_exec", {"command": "echo next"})
        check = await call(client, "permissions_check", {"toolName": "shell_exec", "toolArgs": {"command": "ls"}})
        described = await call(client, "shell_describe", {})
        (workspace / "go").touch()
        waited = await call(client, "shell_wait", {"commandId": running["commandId"], "timeoutMs": 30000})
    assert running["status"] == "running"
    assert "busy" in busy and "shell_wait" in busy and len(seen) == 1  # nobody was asked about the refused call
    assert described["busyPlan"]["tool"] == "shell_wait" and "shell_exec" in described["busyPlan"]["avoidTools"]
    assert check["shellMutationPosture"]["busyPlan"]["tool"] == "shell_wait"
    assert waited["state"] == "completed" and waited["command"]["stdout"] == "late\n"


# ---- permissions posture and rewrites --------------------------------------------------------------------------


REWRITES = [
    ("cat notes.txt", "read", {"path": "/workspace/notes.txt"}),
    ("head -n 5 notes.txt", "read", {"path": "/workspace/notes.txt", "lineCount": 5}),
    ("tail -n 3 notes.txt", "read", {"path": "/workspace/notes.txt", "tailLines": 3}),
    ("sed -n 2,4p notes.txt", "read", {"path": "/workspace/notes.txt", "startLine": 2, "lineCount": 3}),
    ("wc -l notes.txt", "read", {"path": "/workspace/notes.txt", "lineCount": 1}),
    ("ls -la sub", "glob", {"path": "/workspace/sub", "pattern": "*", "limit": 80}),
    ("find . -type f -name '*.py'", "glob", {"path": "/workspace", "pattern": "**/*.py", "kind": "file", "limit": 80}),
    (
        "grep -rn TODO src",
        "grep",
        {"path": "/workspace/src", "query": "TODO", "limit": 20, "regex": True, "caseSensitive": True},
    ),
    ("rg -i todo", "grep", {"path": "/workspace", "query": "todo", "limit": 40, "regex": True, "caseSensitive": False}),
]


@pytest.mark.parametrize(("command", "tool", "args"), REWRITES)
async def test_permissions_check_offers_first_class_rewrites(
    rt: Runtime, connect: Connect, command: str, tool: str, args: dict[str, Any]
) -> None:
    async with connect(rt) as client:
        check = await call(client, "permissions_check", {"toolName": "shell_run", "toolArgs": {"command": command}})
    assert check["nextStep"]["tool"] == tool and check["nextStep"]["args"] == args
    assert check["shellReadFirstAlternatives"][0]["tool"] == tool
    assert check["shellMutationPosture"] is not None


async def test_permissions_posture_for_shell_commands(rt: Runtime, connect: Connect) -> None:
    async with connect(rt) as client:
        plain = await call(client, "permissions_check", {"toolName": "shell_run", "toolArgs": {"command": "ls -1"}})
        piped = await call(client, "permissions_check", {"toolName": "shell_run", "toolArgs": {"command": "ls | wc"}})
        exec_ = await call(client, "permissions_check", {"toolName": "shell_exec", "toolArgs": {"command": "make"}})
        other = await call(client, "permissions_check", {"toolName": "read", "toolArgs": {"path": "a"}})
        await client.call_tool("shell_run", {"command": "cat notes.txt"})  # no elicitation: a pending request
        described = await call(client, "permissions_describe", {})
    assert plain["readOnlyAlternative"] == {
        "tool": "bash",
        "args": {"command": "ls", "args": ["-1"], "cwd": "/workspace"},
        "rationale": plain["readOnlyAlternative"]["rationale"],
    }
    assert piped["readOnlyAlternative"] is None
    assert [s["tool"] for s in piped["shellReadFirstAlternatives"]] == ["shell_describe", "bash"]
    assert piped["nextStep"]["tool"] == "shell_describe"
    assert exec_["nextStep"]["tool"] == "shell_open"  # no shell yet: the recovery plan comes first
    assert other["shellMutationPosture"] is None
    assert described["readOnlyAlternative"]["tool"] == "bash"
    assert described["nextShellStep"]["tool"] == "read"
    assert described["shellMutationPosture"]["persistentShell"] is None


async def test_sandbox_execute_routes_the_shell_actions_as_their_tools(rt: Runtime, connect: Connect) -> None:
    async with connect(rt) as client:
        described = await call(client, "sandbox_execute", {"name": "inspect_persistent_shell", "input": {}})
        listed = await call(client, "sandbox_execute", {"name": "run_command", "input": {"command": "pwd"}})
        escape = await refused(
            client, "sandbox_execute", {"name": "run_command", "input": {"command": "sh", "args": ["-c", "id"]}}
        )
        opened = await call(client, "sandbox_execute", {"name": "open_persistent_shell", "input": {}})
        closed = await call(client, "sandbox_execute", {"name": "close_persistent_shell", "input": {}})
        shell = await refused(client, "sandbox_execute", {"name": "run_shell", "input": {"command": "rm -rf /"}})
        exec_ = await refused(client, "sandbox_execute", {"name": "exec_persistent_shell", "input": {"command": "id"}})
    assert described["output"]["persistentShell"] is None
    assert listed["output"]["ok"] is True and "/workspace" in listed["output"]["stdout"]
    assert escape  # the same allowlist as bash: sh is not on it
    assert opened["output"]["persistentShell"]["status"] == "active"
    assert closed["output"]["persistentShell"]["status"] == "closed"
    assert "shell_run needs a person's approval" in shell and "shell_exec" in exec_  # approval is not sidestepped


async def test_shell_close_refuses_while_a_command_runs_and_restart_records_it_killed(
    runtime: Runtime, connect: Connect
) -> None:
    async with connect(runtime, "legacy", elicitation_callback=YES) as client:
        started = data(await client.call_tool("shell_exec", {"command": "sleep 20", "waitMs": 100}))
        refused = await client.call_tool("shell_close", {})
        still = data(await client.call_tool("shell_read_command", {"commandId": started["commandId"]}))
        data(await client.call_tool("shell_restart", {}))
        killed = data(await client.call_tool("shell_read_command", {"commandId": started["commandId"]}))
        closed = data(await client.call_tool("shell_close", {}))
    assert started["status"] == "running"
    message = error_text(refused)
    assert f"running command {started['commandId']}" in message and "shell_wait" in message
    assert "shell_restart" in message
    assert still["status"] == "running"
    assert killed["status"] == "killed" and killed["exitCode"] is None and not killed["ok"]
    assert closed["persistentShell"]["status"] == "closed"


async def test_a_shell_wait_cut_short_by_the_clients_deadline_answers_running(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    short: RequestParamsMeta = {"managed-tools/timeoutMs": 1500}  # type: ignore[typeddict-unknown-key]
    command = "while [ ! -e go ]; do sleep 0.05; done; echo done"  # runs until the test lets it end
    async with connect(runtime, "legacy", elicitation_callback=YES) as client:
        started = data(await client.call_tool("shell_exec", {"command": command, "waitMs": 30_000}, meta=short))
        waited = await client.call_tool(
            "shell_wait", {"commandId": started["commandId"], "timeoutMs": 10_000}, meta=short
        )
        (workspace / "go").touch()
        finished = data(await client.call_tool("shell_wait", {"commandId": started["commandId"], "timeoutMs": 10_000}))
    answer_ = data(waited)
    assert started["status"] == "running" and started["nextStep"]["tool"] == "shell_wait"  # a handle, not a kill
    assert answer_["state"] == "running" and answer_["command"]["commandId"] == started["commandId"]
    assert finished["state"] == "completed" and finished["command"]["stdout"] == "done\n"
