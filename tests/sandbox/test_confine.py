"""Kernel confinement of spawned programs (issue 10 item 1, and the spawn side of item 5).

The kernel tests bypass the argument parser on purpose: they hand the confined runner an argv that reaches outside
the mounts and show Landlock refuses it, next to an unconfined control that shows the same argv would succeed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import data
from mcp import Client
from test_permissions import answer, client_for

from managed_tools.sandbox import confine, landlock, launcher
from managed_tools.sandbox.confine import FORCE_ENV, shell_policy
from managed_tools.sandbox.mounts import substrate_dir
from managed_tools.sandbox.spawn import Domain
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.ids import utc_now
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.shell import posture as shell_core
from managed_tools.tools.shell.runner import SAFE_PATH, Job, Output, start_process

pytestmark = pytest.mark.anyio
YES = answer("accept", {"approve": True})
needs_landlock = pytest.mark.skipif(
    landlock.abi() == 0, reason="this kernel offers no Landlock (Linux 5.13+ with landlock among the LSMs)"
)
HAS_COMPILER = any(shutil.which(cc, path=launcher.COMPILER_PATH) for cc in launcher.COMPILERS)
needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason="no C compiler on this machine (.ci/run installs one)")


@pytest.fixture
def config(tmp_path: Path) -> ServeConfig:
    """The data dir lies outside the workspace (as the state-dir default has it), a secret sits next to it."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "hello.txt").write_text("hello world\n")
    (tmp_path / "SECRET.txt").write_text("the secret\n")
    return ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")


@pytest.fixture(params=["launcher", "preexec"])
def spawn_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every kernel test runs both ways into a domain: the compiled launcher, and the preexec_fn fallback."""
    mode: str = request.param
    if mode == "launcher" and not HAS_COMPILER:
        pytest.skip("no C compiler on this machine (.ci/run installs one)")
    if mode == "preexec":
        monkeypatch.setenv(FORCE_ENV, "preexec")
    return mode


@pytest.fixture
async def rt(config: ServeConfig, spawn_mode: str) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as runtime:
        if runtime.confinement.mode == "landlock":
            assert runtime.confinement.spawn == spawn_mode, runtime.confinement.spawn_reason
        yield runtime


async def run(rt: Runtime, argv: list[str], confine: Domain | None) -> tuple[int | None, str, str]:
    """Run `argv` in the workspace through the shell runner, straight past the parser."""
    workspace = str(rt.environment.workspace)
    job = Job("0" * 16, "s", "bash", argv[0], argv[1:], "/workspace", utc_now(), Output(4000), Output(4000))

    async def on_done(_: Job) -> None:
        return None

    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": str(rt.confinement.home), "TMPDIR": str(rt.confinement.tmp)}
    await start_process(job, argv, cwd=workspace, env=env, limit_s=20, on_done=on_done, confine=confine)
    await job.recorded.wait()
    return job.exit_code, job.stdout.text()[0], job.stderr.text()[0]


def refused(err: str) -> bool:
    """Landlock refuses a path it was not granted; the mount view does not even have it (or has it read-only)."""
    return any(why in err for why in ("Permission denied", "No such file or directory", "Read-only file system"))


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
    assert code != 0 and out == "" and refused(err)


@needs_landlock
async def test_read_only_hand_writes_nowhere(rt: Runtime) -> None:
    code, _, err = await run(rt, ["touch", "new.txt"], rt.confinement.read_only)
    assert code != 0 and refused(err)
    assert not (rt.environment.workspace / "new.txt").exists()


@needs_landlock
async def test_read_only_hand_opens_no_tcp_connection(rt: Runtime, listener: int) -> None:
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=5); print('connected')"
    # The control: a domain with the host's network (the shell's own goes out only through the egress proxy).
    host = rt.confinement.domain(shell_policy(list(rt.guard.mounts), rt.confinement.private / "shell", network=True))
    assert (await run(rt, ["python3", "-c", connect], host))[1] == "connected\n"
    code, out, err = await run(rt, ["python3", "-c", connect], rt.confinement.read_only)
    assert code != 0 and out == "" and "PermissionError" in err


@needs_landlock
@pytest.mark.parametrize("bad", ["not a ruleset", "closed fd"])
async def test_a_child_that_cannot_confine_itself_never_runs(rt: Runtime, bad: str) -> None:
    domain = rt.confinement.shell
    assert domain is not None
    not_a_ruleset = os.open(os.devnull, os.O_RDONLY)
    if bad == "closed fd":
        os.close(not_a_ruleset)
    try:
        if domain.spawn == "launcher":  # the launcher reports it and exits 126, before the program
            broken = Domain(not_a_ruleset, "launcher", launcher=domain.launcher, view=domain.view, filter=domain.filter)
            code, out, err = await run(rt, ["/bin/sh", "-c", "touch ran.txt; echo ran"], broken)
            assert (code, out) == (126, "") and "could not confine the program" in err and "not run" in err
        else:  # the preexec_fn raises, so CPython never execs
            broken = Domain(not_a_ruleset, "preexec")
            with pytest.raises(subprocess.SubprocessError):
                await run(rt, ["/bin/sh", "-c", "touch ran.txt; echo ran"], broken)
    finally:
        if bad != "closed fd":
            os.close(not_a_ruleset)
    assert not (rt.environment.workspace / "ran.txt").exists()


@needs_landlock
async def test_the_program_does_not_inherit_the_ruleset(rt: Runtime) -> None:
    """A program holding the ruleset fd could add rules to the one every later child is confined by."""
    domain = rt.confinement.shell
    assert domain is not None
    probe = f"import os\ntry:\n    os.fstat({domain.ruleset})\nexcept OSError as e:\n    print(e.errno)"
    assert await run(rt, ["python3", "-c", probe], domain) == (0, "9\n", "")  # EBADF


@needs_landlock
async def test_a_missing_program_is_refused_before_it_starts(rt: Runtime) -> None:
    with pytest.raises(FileNotFoundError):
        await run(rt, ["no-such-program-here"], rt.confinement.read_only)


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
        assert code != 0 and refused(err)
        assert not target.exists()


@needs_landlock
@pytest.mark.parametrize("target", ["shadow", "state.db", "environ", "secret"])
async def test_writable_shell_cannot_read_the_server_state_or_secrets(rt: Runtime, target: str) -> None:
    code, out, err = await sh(rt, f"head -c 100 {outside(rt)[target]}")
    assert code != 0 and out == "" and refused(err)


@needs_landlock
async def test_writable_shell_cannot_signal_the_server(rt: Runtime) -> None:
    code, _, err = await sh(rt, f"kill -0 {os.getpid()}")
    # Landlock's signal scope refuses it; inside a PID namespace the server is not even there to name.
    assert code != 0 and ("not permitted" in err or "No such process" in err)


@needs_landlock
async def test_shell_network_off_refuses_tcp(config: ServeConfig, spawn_mode: str, listener: int) -> None:
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
    assert env["spawn"] == rt.confinement.spawn


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
    assert env["mode"] == sandbox["mode"] == "argv-only" and env["landlockAbi"] == 0 and env["spawn"] == "none"
    assert listed["stdout"] == "hello world\n"


def serve(config: ServeConfig, *flags: str, force: bool | str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != FORCE_ENV}
    if force:
        env[FORCE_ENV] = "argv-only" if force is True else str(force)
    argv = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(config.workspace)]
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


@needs_landlock
@pytest.mark.parametrize("force", [False, "preexec"])
def test_the_start_up_log_says_how_programs_enter_confinement(config: ServeConfig, force: bool | str) -> None:
    if not force and not HAS_COMPILER:
        pytest.skip("no C compiler on this machine (.ci/run installs one)")
    started = serve(config, "--log-level", "INFO", force=force)
    assert started.returncode == 0, started.stderr
    expected = "spawn preexec: forced by MANAGED_TOOLS_CONFINEMENT" if force else "spawn launcher)"
    assert f"confinement: landlock (Landlock ABI {landlock.abi()}, {expected}" in started.stderr, started.stderr


def test_shell_network_takes_on_or_off(config: ServeConfig) -> None:
    bad = serve(config, "--shell-network", "maybe", force=False)
    assert bad.returncode == 2 and "--shell-network" in bad.stderr


# ---- the launcher: built once, never replaceable by a confined program, a fallback without a compiler -----------


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


async def confined_still(config: ServeConfig) -> str:
    """Open a runtime, check its bash hand is confined either way, and say how children enter the domain."""
    async with open_runtime(config) as rt:
        assert (await run(rt, ["cat", "hello.txt"], rt.confinement.read_only))[:2] == (0, "hello world\n")
        code, out, err = await run(rt, ["head", "-c", "100", "../SECRET.txt"], rt.confinement.read_only)
        assert code != 0 and out == "" and refused(err)
        assert rt.confinement.spawn is not None
        return rt.confinement.spawn + ": " + rt.confinement.spawn_reason


@needs_landlock
@needs_compiler
async def test_the_launcher_is_built_once_into_a_private_cache_dir(config: ServeConfig, fresh_cache: Path) -> None:
    assert (await confined_still(config)) == "launcher: "
    built = list((fresh_cache / "managed-tools").glob("launcher-*"))
    assert len(built) == 1 and oct(built[0].stat().st_mode & 0o777) == "0o755"
    assert oct((fresh_cache / "managed-tools").stat().st_mode & 0o777) == "0o700"
    mtime = built[0].stat().st_mtime_ns
    assert (await confined_still(config)) == "launcher: "  # reused, not rebuilt
    assert list((fresh_cache / "managed-tools").glob("launcher-*")) == built and built[0].stat().st_mtime_ns == mtime
    assert not list((fresh_cache / "managed-tools").glob("build-*"))


def fake_compiler(where: Path, script: str) -> str:
    where.mkdir()
    cc = where / "cc"
    cc.write_text(f"#!/bin/sh\n{script}\n")
    cc.chmod(0o755)
    return str(where)


@needs_landlock
@pytest.mark.parametrize(
    ("compiler", "reason"),
    [
        ("none", "no C compiler"),
        ("fails", "could not build the launcher: no compiler today"),
        # It "builds" a binary that would run the program unconfined: the fail-closed probe refuses to install it.
        ("unconfined", "could not build the launcher"),
    ],
)
async def test_without_a_working_compiler_the_interpreter_launches(
    config: ServeConfig, fresh_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, compiler: str,
    reason: str,
) -> None:  # fmt: skip
    out = 'while [ "$1" != -o ]; do shift; done; '  # to the argument after -o, the output
    scripts = {"fails": "echo 'no compiler today' >&2; exit 1", "unconfined": out + 'cp /bin/true "$2"'}
    path = "" if compiler == "none" else fake_compiler(tmp_path / "bin", scripts[compiler])
    monkeypatch.setattr(launcher, "COMPILER_PATH", path)
    how = await confined_still(config)
    assert how.startswith("launcher: ") and reason in how and "the server's interpreter launches" in how, how
    assert not list((fresh_cache / "managed-tools").glob("launcher-*"))


@needs_landlock
async def test_without_a_compiler_or_a_safe_interpreter_children_confine_themselves(
    config: ServeConfig, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launcher, "COMPILER_PATH", "")
    monkeypatch.setattr(confine, "interpreter", lambda: launcher.Launcher("interpreter", ("python3",), ("/",)))
    how = await confined_still(config)
    assert how.startswith("preexec: ") and "the interpreter's / lies where confined programs may write" in how, how


@needs_landlock
async def test_a_confined_program_cannot_replace_the_launcher(rt: Runtime) -> None:
    domain = rt.confinement.shell
    assert domain is not None
    if domain.launcher is None:
        pytest.skip("the preexec_fn path has no launcher")
    target = Path(domain.launcher.argv[0])
    before = os.stat(target)
    for script in (f"cp /bin/true {target}", f"rm -f {target}", f"touch {target.parent}/planted",
                   f"echo x > {target}"):  # fmt: skip
        code, _, err = await sh(rt, script)
        assert code != 0 and (refused(err) or "Operation not permitted" in err), (script, err)
    after = os.stat(target)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert not (target.parent / "planted").exists()


@needs_landlock
async def test_a_cache_dir_a_confined_program_may_write_is_not_used(
    config: ServeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(config.workspace / ".cache"))
    how = await confined_still(config)
    assert how.startswith("launcher: ") and "XDG_CACHE_HOME" in how and "interpreter launches" in how, how


@needs_compiler
def test_concurrent_builds_share_one_launcher(tmp_path: Path) -> None:
    with ThreadPoolExecutor(4) as pool:
        built = set(pool.map(lambda _: launcher.launcher(tmp_path / "cache"), range(4)))
    assert len(built) == 1
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([built.pop().name, "launcher.lock"])
