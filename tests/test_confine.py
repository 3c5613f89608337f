"""Kernel confinement of spawned programs (issue 10 item 1, and the spawn side of item 5).

The kernel tests bypass the argument parser on purpose: they hand the confined runner an argv that reaches outside
the mounts and show Landlock refuses it, next to an unconfined control that shows the same argv would succeed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import data
from mcp import Client
from test_permissions import answer, client_for

from server.config import ServeConfig
from server.runtime import open_runtime
from stores import landlock
from stores.confine import FORCE_ENV, PreExec
from stores.ids import utc_now
from stores.mounts import substrate_dir
from tools import shell_core
from tools.context import Runtime
from tools.shell_runner import SAFE_PATH, Job, Output, start_process

pytestmark = pytest.mark.anyio
YES = answer("accept", {"approve": True})
needs_landlock = pytest.mark.skipif(
    landlock.abi() == 0, reason="this kernel offers no Landlock (Linux 5.13+ with landlock among the LSMs)"
)


@pytest.fixture
def config(tmp_path: Path) -> ServeConfig:
    """The data dir lies outside the workspace (as the state-dir default has it), a secret sits next to it."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "hello.txt").write_text("hello world\n")
    (tmp_path / "SECRET.txt").write_text("the secret\n")
    return ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")


@pytest.fixture
async def rt(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as runtime:
        yield runtime


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


async def run(rt: Runtime, argv: list[str], confine: PreExec | None) -> tuple[int | None, str, str]:
    """Run `argv` in the workspace through the shell runner, straight past the parser."""
    workspace = str(rt.environment.workspace)
    job = Job("0" * 16, "s", "bash", argv[0], argv[1:], "/workspace", utc_now(), Output(4000), Output(4000))

    async def on_done(_: Job) -> None:
        return None

    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": str(rt.confinement.home), "TMPDIR": str(rt.confinement.tmp)}
    await start_process(job, argv, cwd=workspace, env=env, limit_s=20, on_done=on_done, confine=confine)
    await job.recorded.wait()
    return job.exit_code, job.stdout.text()[0], job.stderr.text()[0]


def outside(rt: Runtime) -> dict[str, str]:
    return {
        "shadow": "/etc/shadow",
        "state.db": str(rt.environment.data_dir / "state.db"),
        "environ": f"/proc/{os.getpid()}/environ",
        "secret": "../SECRET.txt",
    }


# ---- the read-only hand ---------------------------------------------------------------------------------------


@needs_landlock
async def test_read_only_hand_reads_the_workspace(rt: Runtime) -> None:
    assert rt.confinement.mode == "landlock" and rt.confinement.read_only is not None
    assert await run(rt, ["cat", "hello.txt"], rt.confinement.read_only) == (0, "hello world\n", "")
    code, out, _ = await run(rt, ["ls", "-la"], rt.confinement.read_only)
    assert code == 0 and "hello.txt" in out


@needs_landlock
@pytest.mark.parametrize("target", ["shadow", "state.db", "environ", "secret"])
async def test_read_only_hand_cannot_read_outside_its_mounts(rt: Runtime, target: str) -> None:
    path = outside(rt)[target]
    argv = ["head", "-c", "100", path]
    if target != "shadow" or os.access(path, os.R_OK):  # the control: unconfined, the same argv reads it
        code, out, _ = await run(rt, argv, None)
        assert code == 0 and out
    code, out, err = await run(rt, argv, rt.confinement.read_only)
    assert code != 0 and out == "" and "Permission denied" in err


@needs_landlock
async def test_read_only_hand_writes_nowhere(rt: Runtime) -> None:
    code, _, err = await run(rt, ["touch", "new.txt"], rt.confinement.read_only)
    assert code != 0 and "Permission denied" in err
    assert not (rt.environment.workspace / "new.txt").exists()


@needs_landlock
async def test_read_only_hand_opens_no_tcp_connection(rt: Runtime, listener: int) -> None:
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=5); print('connected')"
    assert (await run(rt, ["python3", "-c", connect], rt.confinement.shell))[1] == "connected\n"  # control
    code, out, err = await run(rt, ["python3", "-c", connect], rt.confinement.read_only)
    assert code != 0 and out == "" and "PermissionError" in err


@needs_landlock
async def test_a_child_that_cannot_confine_itself_never_runs(rt: Runtime) -> None:
    not_a_ruleset = os.open(os.devnull, os.O_RDONLY)
    try:
        with pytest.raises(subprocess.SubprocessError):
            await run(rt, ["touch", "ran.txt"], landlock.restrictor(not_a_ruleset))
    finally:
        os.close(not_a_ruleset)
    assert not (rt.environment.workspace / "ran.txt").exists()


# ---- the writable shell ---------------------------------------------------------------------------------------


async def sh(rt: Runtime, script: str) -> tuple[int | None, str, str]:
    return await run(rt, ["/bin/sh", "-c", script], rt.confinement.shell)


@needs_landlock
async def test_writable_shell_writes_the_workspace_and_its_private_tmp(rt: Runtime) -> None:
    code, out, err = await sh(
        rt, 'touch made.txt && echo x > "$TMPDIR/t" && cat "$TMPDIR/t" && python3 -c "print(1+1)"'
    )
    assert (code, out, err) == (0, "x\n2\n", "")
    assert (rt.environment.workspace / "made.txt").exists()


@needs_landlock
async def test_writable_shell_cannot_write_outside_the_writable_mounts(rt: Runtime, tmp_path: Path) -> None:
    substrate = substrate_dir(rt.environment.data_dir, rt.environment.agent_id)
    for target in (tmp_path / "outside.txt", substrate / "planted.md"):
        code, _, err = await sh(rt, f"touch {target}")
        assert code != 0 and "Permission denied" in err
        assert not target.exists()


@needs_landlock
@pytest.mark.parametrize("target", ["shadow", "state.db", "environ", "secret"])
async def test_writable_shell_cannot_read_the_server_state_or_secrets(rt: Runtime, target: str) -> None:
    code, out, err = await sh(rt, f"head -c 100 {outside(rt)[target]}")
    assert code != 0 and out == "" and "Permission denied" in err


@needs_landlock
async def test_writable_shell_cannot_signal_the_server(rt: Runtime) -> None:
    code, _, err = await sh(rt, f"kill -0 {os.getpid()}")
    assert code != 0 and "not permitted" in err


@needs_landlock
async def test_shell_network_off_refuses_tcp(config: ServeConfig, listener: int) -> None:
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=5)"
    async with open_runtime(config.model_copy(update={"shell_network": False})) as rt:
        code, _, err = await sh(rt, f'python3 -c "{connect}"')
    assert code != 0 and "PermissionError" in err


# ---- through the real MCP client --------------------------------------------------------------------------------


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return data(await client.call_tool(tool, args))


@needs_landlock
async def test_grep_glob_and_bash_work_confined(rt: Runtime) -> None:
    async with client_for(rt) as client:
        hits = await call(client, "grep", {"query": "hello"})
        assert [h["path"] for h in hits["hits"]] == ["/workspace/hello.txt"]
        assert (await call(client, "grep", {"query": "hel+o", "regex": True}))["count"] == 1
        assert (await call(client, "glob", {"pattern": "*.txt"}))["matches"] == ["/workspace/hello.txt"]
        assert (await call(client, "bash", {"command": "cat", "args": ["hello.txt"]}))["stdout"] == "hello world\n"


async def test_shells_get_a_private_home_and_source_no_start_up_file(rt: Runtime) -> None:
    workspace = rt.environment.workspace
    for name in (".bash_profile", ".profile", ".bashrc", ".bash_login"):
        (workspace / name).write_text("touch /tmp/never; echo planted > planted.txt\n")
    private = rt.confinement.private
    assert oct(private.stat().st_mode & 0o777) == "0o700"
    async with client_for(rt, "legacy", elicitation_callback=YES) as client:
        ran = await call(client, "shell_run", {"command": 'echo "$HOME|$TMPDIR"; python3 -c "print(1+1)"'})
        shell = await call(client, "shell_exec", {"command": 'echo "$HOME"'})
    home, tmp = ran["stdout"].splitlines()[0].split("|")
    assert ran["stdout"].splitlines()[1] == "2"
    assert home == shell["stdout"].strip() == str(rt.confinement.home) and tmp == str(rt.confinement.tmp)
    assert not any(Path(p).is_relative_to(workspace) for p in (home, tmp))
    assert not (workspace / "planted.txt").exists()
    assert {"ENV", "BASH_ENV"} <= shell_core.PROTECTED_KEYS


async def test_the_private_dir_goes_with_the_runtime(config: ServeConfig) -> None:
    async with open_runtime(config) as rt:
        private = rt.confinement.private
        assert private.is_dir()
    assert not private.exists()


# ---- reporting ------------------------------------------------------------------------------------------------


@needs_landlock
async def test_describe_tools_report_landlock(rt: Runtime) -> None:
    async with client_for(rt) as client:
        env = (await call(client, "environment_describe", {}))["confinement"]
        sandbox = (await call(client, "sandbox_describe", {}))["confinement"]
    assert env == sandbox
    assert env["mode"] == "landlock" and env["landlockAbi"] == landlock.abi() and env["shellNetwork"] is True


async def test_forced_argv_only_is_reported_and_still_runs(
    config: ServeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FORCE_ENV, "argv-only")
    async with open_runtime(config) as rt:
        assert rt.confinement.read_only is None and rt.confinement.shell is None
        assert "argv-only" in rt.confinement.notices[0]
        async with client_for(rt) as client:
            env = (await call(client, "environment_describe", {}))["confinement"]
            sandbox = (await call(client, "sandbox_describe", {}))["confinement"]
            listed = await call(client, "bash", {"command": "cat", "args": ["hello.txt"]})
    assert env["mode"] == sandbox["mode"] == "argv-only" and env["landlockAbi"] == 0
    assert listed["stdout"] == "hello world\n"


def serve(config: ServeConfig, *flags: str, force: bool) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != FORCE_ENV}
    if force:
        env[FORCE_ENV] = "argv-only"
    argv = [sys.executable, "-m", "server", "serve", "--workspace", str(config.workspace)]
    argv += ["--data-dir", str(config.data_dir), *flags]
    return subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env
    )


def test_require_confinement_refuses_to_start_without_it(config: ServeConfig) -> None:
    refused = serve(config, "--require-confinement", force=True)
    assert refused.returncode == 2
    assert "--require-confinement" in refused.stderr and "Traceback" not in refused.stderr
    degraded = serve(config, force=True)  # without the flag it starts, and says what it cannot enforce
    assert degraded.returncode == 0 and "confinement: argv-only" in degraded.stderr


@needs_landlock
def test_require_confinement_starts_where_the_kernel_confines(config: ServeConfig) -> None:
    started = serve(config, "--require-confinement", "--shell-network", "off", force=False)
    assert started.returncode == 0 and "argv-only" not in started.stderr, started.stderr


def test_shell_network_takes_on_or_off(config: ServeConfig) -> None:
    bad = serve(config, "--shell-network", "maybe", force=False)
    assert bad.returncode == 2 and "--shell-network" in bad.stderr
