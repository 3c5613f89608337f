"""Approvals that scale (issue 23, item 3): `remember: session` approves one exact call (its digest: command, cwd,
env, arguments) for the rest of the session, in both protocol eras, on the page and from the CLI; `--auto-sandboxed`
runs shell_run and shell_exec unasked when they run inside the full sandbox and asks when the sandbox falls short;
every unasked run is an audited `permission.unasked` event; the question starts with the command and leaves out
null and default arguments.

The coding loop of the issue's "Done when" runs here through a real client: a workspace `.venv` made from an
interpreter outside the system directories runs its tests under shell_run; eight commands (two distinct) ask a
person twice with `remember: session` and never under `--auto-sandboxed`, where a TCP connect and a write outside
the workspace still fail.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import data, error_text
from mcp import Client
from support.toolchain_fixtures import make_venv, outside_install
from test_permissions import answer, cli, client_for

from managed_tools.sandbox import landlock, layers
from managed_tools.sandbox.confine import FORCE_ENV
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import approvals
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio
needs_landlock = pytest.mark.skipif(landlock.abi() == 0, reason="this kernel offers no Landlock")
needs_every_layer = pytest.mark.skipif(
    bool(layers.missing(layers.describe())), reason="a sandbox layer is missing on this system (CI has them all)"
)
ERAS = ["auto", "legacy"]
TESTS = ".venv/bin/python -m unittest -q test_one"
LIST = "ls"
LOOP = [TESTS, LIST] * 4  # eight commands, two distinct
SESSION = {"approve": True, "remember": "session"}
ONCE = {"approve": True}


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return outside_install(tmp_path_factory.mktemp("python"))


@pytest.fixture
def project(install: Path, workspace: Path) -> Path:
    make_venv(install, workspace / ".venv")
    (workspace / "test_one.py").write_text("import unittest\nclass T(unittest.TestCase):\n    def test(self): pass\n")
    return workspace


def serve_config(project: Path, tmp_path: Path, *, auto: bool = False, network: bool = True) -> ServeConfig:
    config = ServeConfig.build(
        workspace=project,
        data_dir=tmp_path / "data",
        auto_sandboxed=auto or None,
        tool_modules=("support.probe_tools",),
    )
    return config.model_copy(update={"shell_network": network})


@pytest.fixture
async def rt(project: Path, tmp_path: Path) -> AsyncIterator[Runtime]:
    async with open_runtime(serve_config(project, tmp_path)) as runtime:
        yield runtime


async def loop(client: Client, commands: list[str]) -> list[dict[str, Any]]:
    return [data(await client.call_tool("shell_run", {"command": command})) for command in commands]


async def unasked(rt: Runtime) -> list[dict[str, Any]]:
    async with rt.db.read() as tx:
        rows = await tx.fetchall("SELECT payload FROM events WHERE type = 'permission.unasked' ORDER BY seq")
    return [json.loads(row[0]) for row in rows]


async def session_of(client: Client) -> str:
    return str(data(await client.call_tool("session_get_snapshot", {}))["sessionId"])


# ---- remember: session ------------------------------------------------------------------------------------------


@needs_landlock
@pytest.mark.parametrize("mode", ERAS)
async def test_the_coding_loop_asks_twice_with_remember_session(rt: Runtime, mode: str) -> None:
    seen: list[str] = []
    async with client_for(rt, mode, elicitation_callback=answer("accept", SESSION, seen)) as client:
        results = await loop(client, LOOP)
    assert len(seen) == 2, seen
    assert all(r["exitCode"] == 0 for r in results) and "OK" in results[0]["stderr"]
    audited = await unasked(rt)
    assert len(audited) == 6 and {a["why"] for a in audited} == {"remembered"}
    async with rt.db.read() as tx:
        records = await approvals.list_open(tx)
    assert records == []  # each remembered approval was consumed by its first run, and is used from there


@needs_landlock
@pytest.mark.parametrize("mode", ERAS)
async def test_once_asks_every_time(rt: Runtime, mode: str) -> None:
    seen: list[str] = []
    async with client_for(rt, mode, elicitation_callback=answer("accept", ONCE, seen)) as client:
        await loop(client, LOOP[:4])
    assert len(seen) == 4 and await unasked(rt) == []


@needs_landlock
async def test_a_remembered_approval_binds_the_exact_call(rt: Runtime) -> None:
    seen: list[str] = []
    async with client_for(rt, elicitation_callback=answer("accept", SESSION, seen)) as client:
        await loop(client, [LIST, LIST])
        data(await client.call_tool("shell_run", {"command": LIST, "timeoutMs": 20_000}))  # other arguments
        data(await client.call_tool("shell_run", {"command": "ls ", "cwd": "/workspace"}))  # other text
        data(await client.call_tool("shell_set_env", {"key": "GREETING", "value": "hi"}))
        data(await client.call_tool("shell_run", {"command": LIST}))  # the same text, another env
    assert len(seen) == 4


@needs_landlock
async def test_an_interrupt_or_another_session_asks_again(rt: Runtime) -> None:
    seen: list[str] = []
    async with client_for(rt, elicitation_callback=answer("accept", SESSION, seen)) as client:
        await loop(client, [LIST, LIST])
        session_id = await session_of(client)
        async with rt.db.write() as tx:
            await approvals.interrupt(tx, session_id, by="test")
        await loop(client, [LIST])
    async with client_for(rt, elicitation_callback=answer("accept", ONCE, seen)) as other:
        await loop(other, [LIST])
    assert len(seen) == 3


@needs_landlock
async def test_a_decline_is_never_remembered(rt: Runtime) -> None:
    async with client_for(rt, elicitation_callback=answer("decline", {"remember": "session"})) as client:
        denied = await client.call_tool("shell_run", {"command": LIST})
    assert "denied" in error_text(denied)
    async with rt.db.read() as tx:
        assert await tx.scalar("SELECT COUNT(*) FROM approvals WHERE remember = 'session'") == 0


@needs_landlock
async def test_the_cli_approves_for_the_session(rt: Runtime, project: Path, tmp_path: Path) -> None:
    config = serve_config(project, tmp_path)
    async with client_for(rt) as client:  # no elicitation: the person answers in a terminal
        blocked = await client.call_tool("shell_run", {"command": LIST})
        request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
        approved = await cli(config, "approve", request_id, "--remember", "session")
        results = await loop(client, [LIST, LIST, LIST])
        again = await client.call_tool("shell_run", {"command": "pwd"})
    assert approved.returncode == 0 and "again unasked for the rest of that session" in approved.stdout
    assert all(r["exitCode"] == 0 for r in results)
    assert [a["why"] for a in await unasked(rt)] == ["remembered", "remembered"]
    assert "needs a person's approval" in error_text(again)  # another command: its own question


# ---- --auto-sandboxed ---------------------------------------------------------------------------------------------


@needs_every_layer
@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("network", [False, True])  # off, or only through the egress allowlist (empty here)
async def test_auto_sandboxed_runs_the_loop_unasked_and_the_sandbox_still_holds(
    project: Path, tmp_path: Path, mode: str, network: bool, listener: int
) -> None:
    seen: list[str] = []
    outside = tmp_path / "outside"
    outside.mkdir()
    escape = f"echo x > {outside}/planted"
    connect = f".venv/bin/python -c 'import socket; socket.create_connection((\"127.0.0.1\", {listener}), 2)'"
    async with (
        open_runtime(serve_config(project, tmp_path, auto=True, network=network)) as rt,
        client_for(rt, mode, elicitation_callback=answer("accept", ONCE, seen)) as client,
    ):
        results = await loop(client, LOOP)
        wrote, connected = await loop(client, [escape, connect])
        persistent = data(await client.call_tool("shell_exec", {"command": "echo in the persistent shell"}))
        check = {"toolName": "shell_run", "toolArgs": {"command": "make"}}
        checked = data(await client.call_tool("permissions_check", check))
        audited = await unasked(rt)
    assert seen == [] and checked["approvalState"] == "auto_sandboxed" and not checked["requiresConfirmation"]
    assert all(r["exitCode"] == 0 for r in results) and "OK" in results[0]["stderr"]
    assert wrote["exitCode"] != 0 and not (outside / "planted").exists()
    assert connected["exitCode"] != 0 and "Error" in connected["stderr"]  # refused, or no route: never connected
    assert persistent["stdout"] == "in the persistent shell\n"
    assert len(audited) == 11 and {a["why"] for a in audited} == {"auto_sandboxed"}
    assert ("network through the egress allowlist" if network else "network off") in audited[0]["sandbox"]


@needs_landlock
@pytest.mark.parametrize(
    ("network", "forced", "why"),
    [
        (
            False,
            "landlock-only",
            "the view, processes, network and cgroup layers are missing here (forced off by",
        ),  # no bubblewrap, no cgroups
        (
            True,
            "landlock-only",
            "the view, processes, network and cgroup layers are missing here (forced off by",
        ),  # nor a namespace for the proxy
    ],
)
async def test_auto_sandboxed_asks_when_the_sandbox_falls_short(  # noqa: PLR0917 (fixtures and parameters)
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, network: bool, forced: str, why: str
) -> None:
    monkeypatch.setenv(FORCE_ENV, forced)
    seen: list[str] = []
    async with (
        open_runtime(serve_config(project, tmp_path, auto=True, network=network)) as rt,
        client_for(rt, elicitation_callback=answer("accept", ONCE, seen)) as client,
    ):
        await loop(client, [LIST])
        audited = await unasked(rt)
    assert len(seen) == 1 and f"Asked because it needs more than the sandbox gives: {why}" in seen[0]
    assert audited == []


async def test_auto_sandboxed_never_covers_a_tool_the_sandbox_does_not_contain(project: Path, tmp_path: Path) -> None:
    seen: list[str] = []
    async with (
        open_runtime(serve_config(project, tmp_path, auto=True, network=False)) as rt,
        client_for(rt, elicitation_callback=answer("decline", None, seen)) as client,
    ):
        denied = await client.call_tool("probe_danger", {"label": "outside the sandbox"})
        audited = await unasked(rt)
    assert len(seen) == 1 and "denied" in error_text(denied) and audited == []


# ---- the question ---------------------------------------------------------------------------------------------------


@needs_landlock
async def test_the_question_starts_with_the_command_and_leaves_out_defaults(rt: Runtime) -> None:
    seen: list[str] = []
    async with client_for(rt, elicitation_callback=answer("accept", ONCE, seen)) as client:
        await loop(client, [LIST])
        data(await client.call_tool("shell_run", {"command": LIST, "timeoutMs": 20_000, "cwd": None}))
    first, second = seen
    assert first.startswith("Command, run once by") and first.split("\n")[1] == "    ls"
    assert "null" not in first and "timeoutMs" not in first and "Environment" not in first
    assert "Asked by shell_run (Run a shell command)." in first and "Other arguments" not in first
    assert 'Other arguments: {"timeoutMs": 20000}' in second and "null" not in second


@needs_landlock
async def test_permissions_check_says_a_remembered_call_runs_without_a_question(rt: Runtime) -> None:
    async with client_for(rt, elicitation_callback=answer("accept", SESSION)) as client:
        before = data(
            await client.call_tool("permissions_check", {"toolName": "shell_run", "toolArgs": {"command": LIST}})
        )
        await loop(client, [LIST])
        after = data(
            await client.call_tool("permissions_check", {"toolName": "shell_run", "toolArgs": {"command": LIST}})
        )
    assert before["approvalState"] == "none" and before["requiresConfirmation"]
    assert after["approvalState"] == "remembered" and not after["requiresConfirmation"]
    assert after["nextStep"]["tool"] == "shell_run" and "approved it for this session" in after["nextStep"]["rationale"]
