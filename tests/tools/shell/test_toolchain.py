"""The project's toolchain under the writable shell (issue 23, item 2): the interpreters the workspace's virtualenvs
point to are granted read and execute (never write), `sandbox.readPaths` / `sandbox.writePaths` grant the rest, a
grant that reaches where the server keeps its secrets is refused, and nothing inside the workspace grants more than
a real Python install.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import data, upstreams_started
from support.toolchain_fixtures import SYSTEM_PYTHON, make_venv, outside_install, pyenv_home
from test_permissions import answer, client_for
from test_toolchain_found import UPSTREAM

from managed_tools.sandbox import landlock
from managed_tools.sandbox.grants import (
    GrantError,
    Grants,
    ToolchainGrant,
    config_line,
    configured,
    shell_path,
    toolchain_grants,
    venv_interpreters,
)
from managed_tools.sandbox.paths import inside
from managed_tools.sandbox.toolchains import VARIABLES
from managed_tools.server.config.config_files import user_config_file
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import StartupError, open_runtime
from managed_tools.tools.shell.diagnose import _needs

pytestmark = pytest.mark.anyio
YES = answer("accept", {"approve": True})
needs_landlock = pytest.mark.skipif(landlock.abi() == 0, reason="this kernel offers no Landlock")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of the test's own: the toolchains detected are the ones a test puts there, not this machine's."""
    where = tmp_path / "home"
    where.mkdir()
    monkeypatch.setenv("HOME", str(where))
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return where


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return outside_install(tmp_path_factory.mktemp("python"))


def _cfg(where: Path, home: str) -> None:
    where.mkdir(parents=True)
    (where / "pyvenv.cfg").write_text(f"home = {home}\nversion = 3.11.7\n")


# ---- which interpreters a workspace's virtualenvs point to ----------------------------------------------------


def test_each_venv_of_the_workspace_and_one_level_down_grants_its_real_prefix(install: Path, workspace: Path) -> None:
    make_venv(install, workspace / ".venv")
    _cfg(workspace / "service" / "venv", str(install / "bin"))
    _cfg(workspace / "a" / "b" / ".venv", str(install / "bin"))  # two levels down: not looked at
    found = venv_interpreters(workspace, {})
    assert found.grants == (ToolchainGrant(Path(os.path.realpath(install)), "run", "interpreter of .venv/pyvenv.cfg"),)
    assert found.notices == ()


def test_a_home_through_a_symlink_grants_the_real_prefix(install: Path, workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(install / "bin")
    _cfg(workspace / "env", str(tmp_path / "alias"))
    assert [g.path for g in venv_interpreters(workspace, {}).grants] == [Path(os.path.realpath(install))]


@pytest.mark.parametrize(
    ("home", "why"),
    [
        ("/etc", "holds no Python install"),  # a planted pyvenv.cfg pointing at a secret directory
        ("relative/bin", "no absolute `home`"),
        ("", "no absolute `home`"),
    ],
)
def test_a_pyvenv_cfg_selects_only_among_real_python_installs(workspace: Path, home: str, why: str) -> None:
    _cfg(workspace / ".venv", home)
    found = venv_interpreters(workspace, {})
    assert found.grants == () and why in found.notices[0]


def test_the_system_interpreter_needs_no_grant(workspace: Path) -> None:
    _cfg(workspace / ".venv", "/usr/bin")
    assert venv_interpreters(workspace, {}).grants == ()


def test_a_prefix_over_a_protected_place_or_the_home_is_not_granted(
    install: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cfg(workspace / ".venv", str(install / "bin"))
    found = venv_interpreters(workspace, {"the data dir": install / "state"})
    assert found.grants == () and "contains the data dir" in found.notices[0]
    monkeypatch.setenv("HOME", str(install / "home"))
    found = venv_interpreters(workspace, {})
    assert found.grants == () and "contains the user's home directory" in found.notices[0]


# ---- what the person configures -------------------------------------------------------------------------------


def test_configured_paths_are_resolved_and_keep_their_access(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "cache").mkdir()
    grants = configured([tmp_path / "tools", tmp_path / "missing"], [tmp_path / "cache"], {})
    assert [(g.path.name, g.access) for g in grants] == [("tools", "run"), ("cache", "write")]


@pytest.mark.parametrize("where", ["inside", "over"])
def test_a_configured_path_overlapping_a_protected_one_is_refused(tmp_path: Path, where: str) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "sub").mkdir(parents=True)
    given = data_dir / "sub" if where == "inside" else tmp_path
    with pytest.raises(GrantError, match=r"config sandbox\.writePaths: .* is refused: it (lies inside|contains) the"):
        configured([], [given], {"the data dir": data_dir})


def test_a_relative_configured_path_is_refused() -> None:
    with pytest.raises(GrantError, match="not an absolute path"):
        configured([Path("tools")], [], {})


def _write_config(data_dir: Path, body: dict[str, object]) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "config.json").write_text(json.dumps(body))


async def test_start_up_refuses_a_grant_inside_the_data_dir(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _write_config(data_dir, {"sandbox": {"readPaths": [str(data_dir)]}})
    config = ServeConfig.build(workspace=workspace, data_dir=data_dir)
    with pytest.raises(StartupError, match=r"sandbox\.readPaths: .* lies inside the data dir"):
        async with open_runtime(config):
            pass


async def test_start_up_refuses_a_grant_of_the_vault_keys(workspace: Path, tmp_path: Path) -> None:
    keys = user_config_file().parent / "vault-keys"
    keys.mkdir(parents=True)
    _write_config(tmp_path / "data", {"sandbox": {"readPaths": [str(keys)]}})
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    with pytest.raises(StartupError, match="the user config directory"):
        async with open_runtime(config):
            pass


def test_the_user_wide_sandbox_holds_until_a_workspace_gives_its_own(workspace: Path, tmp_path: Path) -> None:
    user_config_file().parent.mkdir(parents=True, exist_ok=True)
    user_config_file().write_text(json.dumps({"sandbox": {"readPaths": ["/opt/a"]}, "autoSandboxed": True}))
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    assert config.sandbox.read_paths == (Path("/opt/a"),) and config.auto_sandboxed
    _write_config(tmp_path / "data", {"sandbox": {"readPaths": ["/opt/b"], "writePaths": ["/opt/c"]}})
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    assert config.sandbox.read_paths == (Path("/opt/b"),) and config.sandbox.write_paths == (Path("/opt/c"),)


# ---- the kernel ------------------------------------------------------------------------------------------------


@pytest.fixture
async def venv_runtime(install: Path, workspace: Path, tmp_path: Path) -> AsyncIterator[ServeConfig]:
    make_venv(install, workspace / ".venv")
    (workspace / "test_one.py").write_text("import unittest\nclass T(unittest.TestCase):\n    def test(self): pass\n")
    yield ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")


@needs_landlock
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_workspace_venv_runs_its_tests_under_shell_run(venv_runtime: ServeConfig, mode: str) -> None:
    async with open_runtime(venv_runtime) as rt, client_for(rt, mode, elicitation_callback=YES) as client:
        assert rt.confinement.mode == "landlock"
        ran = data(await client.call_tool("shell_run", {"command": ".venv/bin/python -m unittest -q test_one"}))
        prefix = rt.confinement.grants.grants[0].path
        wrote = data(await client.call_tool("shell_run", {"command": f"touch {prefix}/x"}))
    assert ran["exitCode"] == 0 and "OK" in ran["stderr"], ran
    refused = ("Permission denied", "Read-only file system")  # Landlock, or bubblewrap's read-only bind
    assert wrote["exitCode"] != 0 and any(why in wrote["stderr"] for why in refused)  # read and execute, never write


@needs_landlock
async def test_a_configured_write_path_is_writable_and_a_read_path_only_readable(
    workspace: Path, tmp_path: Path
) -> None:
    tools, cache = tmp_path / "tools", tmp_path / "cache"
    tools.mkdir()
    cache.mkdir()
    (tools / "hello").write_text("#!/bin/sh\necho hello from tools\n")
    (tools / "hello").chmod(0o755)
    _write_config(tmp_path / "data", {"sandbox": {"readPaths": [str(tools)], "writePaths": [str(cache)]}})
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    script = f"{tools}/hello && echo cached > {cache}/entry && touch {tools}/nope"
    async with open_runtime(config) as rt, client_for(rt, elicitation_callback=YES) as client:
        ran = data(await client.call_tool("shell_run", {"command": script}))
    assert "hello from tools" in ran["stdout"] and (cache / "entry").read_text() == "cached\n"
    assert "cannot touch" in ran["stderr"] and not (tools / "nope").exists()


# ---- the shell's PATH ------------------------------------------------------------------------------------------


def test_the_shell_path_keeps_the_entries_the_shell_may_run_from(tmp_path: Path, workspace: Path) -> None:
    granted, other = tmp_path / "granted" / "bin", tmp_path / "other" / "bin"
    granted.mkdir(parents=True)
    other.mkdir(parents=True)
    (workspace / "bin").mkdir()
    grants = Grants((ToolchainGrant(tmp_path / "granted", "run", "config sandbox.readPaths"),))
    server = os.pathsep.join([str(granted), str(other), str(workspace / "bin"), "bin", "/usr/bin", "/no/such/dir"])
    path = shell_path(server, grants, [workspace], fallback="/usr/local/bin:/usr/bin:/bin")
    assert path.split(os.pathsep) == [str(granted), "/usr/bin", "/usr/local/bin", "/bin"]


@needs_landlock
async def test_a_granted_tool_on_the_users_path_runs_by_name(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    (tools / "bin" / "mytool").write_text("#!/bin/sh\necho my tool ran\n")
    (tools / "bin" / "mytool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools / 'bin'}{os.pathsep}{os.environ['PATH']}")
    _write_config(tmp_path / "data", {"sandbox": {"readPaths": [str(tools)]}})
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    async with open_runtime(config) as rt, client_for(rt, elicitation_callback=YES) as client:
        ran = data(await client.call_tool("shell_run", {"command": "mytool"}))
    assert ran["exitCode"] == 0 and ran["stdout"] == "my tool ran\n", ran


# ---- why a command could not run -------------------------------------------------------------------------------


@needs_landlock
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_126_or_127_names_the_interpreter_outside_and_the_key_that_grants_it(
    install: Path, workspace: Path, tmp_path: Path, mode: str
) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    async with open_runtime(config) as rt, client_for(rt, mode, elicitation_callback=YES) as client:
        make_venv(install, workspace / ".venv")  # made after the server started: not granted yet
        ran = data(await client.call_tool("shell_run", {"command": ".venv/bin/python -c pass"}))
        fine = data(await client.call_tool("shell_run", {"command": "sh -c 'exit 126'"}))
    real = (workspace / ".venv" / "bin" / "python").resolve()
    assert ran["exitCode"] in (126, 127), ran  # 127 where bubblewrap's view does not even show the path
    assert f"(which is {real}) lies outside the shell's sandbox" in ran["stderr"]
    assert config_line(str(real.parent.parent)) in ran["stderr"] and "text" not in ran
    assert fine["exitCode"] == 126 and "[managed-tools]" not in fine["stderr"]  # sh is inside: nothing to say


@needs_landlock
async def test_127_names_a_tool_on_the_users_path_the_shell_cannot_see(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools" / "bin"
    tools.mkdir(parents=True)
    (tools / "mytool").write_text("#!/bin/sh\necho ran\n")
    (tools / "mytool").chmod(0o755)
    (workspace / "script").write_text(f"#!{tools / 'mytool'}\n")
    (workspace / "script").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    async with open_runtime(config) as rt, client_for(rt, elicitation_callback=YES) as client:
        missing = data(await client.call_tool("shell_run", {"command": "FOO=1 mytool --flag"}))
        script = data(await client.call_tool("shell_run", {"command": "./script"}))
    assert missing["exitCode"] == 127 and f"{tools / 'mytool'} lies outside" in missing["stderr"], missing
    note = script["stderr"].split("[managed-tools]")[1]
    assert script["exitCode"] in (126, 127) and f"{tools / 'mytool'}" in note, script
    followed = re.search(r"config\.json \((\{.*?\})\)", note)  # the line the note gives, written as given
    assert followed is not None and json.loads(followed[1]) == {"sandbox": {"readPaths": [str(tools.parent)]}}, note
    _write_config(tmp_path / "data", json.loads(followed[1]))
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    async with open_runtime(config) as rt, client_for(rt, elicitation_callback=YES) as client:
        again = data(await client.call_tool("shell_run", {"command": "mytool && ./script"}))
    assert again["exitCode"] == 0 and again["stdout"] == "ran\nran\n", again


@needs_landlock
async def test_a_shim_is_never_the_grant_and_the_servers_own_venv_never_runs(
    workspace: Path, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyenv_home(home, "3.11.99")
    (home / ".pyenv" / "version").write_text("3.99\n")  # selects a version that is not installed
    own = Path(sys.executable).parent
    monkeypatch.setenv("PATH", os.pathsep.join([str(own), str(home / ".pyenv" / "shims"), "/usr/bin", "/bin"]))
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    async with open_runtime(config) as rt, client_for(rt, elicitation_callback=YES) as client:
        shim = data(await client.call_tool("shell_run", {"command": "python -c pass"}))
        ours = data(await client.call_tool("shell_run", {"command": "managed-tools --version"}))
        assert str(own) not in rt.confinement.shell_path and "shims" not in rt.confinement.shell_path
    assert shim["exitCode"] in (126, 127) and "is a pyenv shim, which the sandbox never runs" in shim["stderr"], shim
    assert "readPaths" not in shim["stderr"]  # nothing to grant: no install holds the version it selects
    assert ours["exitCode"] == 127 and "found only in the server's own virtualenv" in ours["stderr"], ours


@needs_landlock
async def test_an_upstream_that_cannot_start_says_what_to_grant_and_following_it_works(
    workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"no {SYSTEM_PYTHON} to run the upstream with")
    server = tmp_path / "tools" / "bin" / "venv-server"
    server.parent.mkdir(parents=True)
    server.write_text(f"#!{SYSTEM_PYTHON}\n{UPSTREAM}")
    server.chmod(0o755)
    _write_config(tmp_path / "data", {"mcpServers": {"tool": {"command": str(server)}}})
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    with caplog.at_level(logging.WARNING, logger="managed_tools.upstream"):
        async with open_runtime(config) as rt:
            await upstreams_started(rt, "tool")
    note = next((r.getMessage() for r in caplog.records if "[managed-tools]" in r.getMessage()), "")
    followed = re.search(r"config\.json \((\{.*?\})\)", note)
    assert f"{server} lies outside upstream tool's sandbox" in note and followed is not None, caplog.text
    assert json.loads(followed[1]) == {"sandbox": {"readPaths": [str(server.parent.parent)]}}
    _write_config(tmp_path / "data", {**json.loads(followed[1]), "mcpServers": {"tool": {"command": str(server)}}})
    async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")) as rt:
        await upstreams_started(rt, "tool")
        assert rt.registry.absent_reason("tool__prefix") is None


def test_the_elf_loader_and_the_shebang_are_what_a_program_needs(workspace: Path) -> None:
    (workspace / "tool").write_text("#!/usr/bin/env python3\n")
    needs = [what for _, what in _needs(workspace / "tool", "/usr/bin:/bin")]
    assert needs[0] == str(workspace / "tool") and "the interpreter of" in needs[1]
    loader = [real for real, _ in _needs(Path("/bin/sh"), "/usr/bin")][1]
    assert "ld-linux" in loader or "ld-musl" in loader


# ---- toolchain managers, found ---------------------------------------------------------------------------------


def _tool(where: Path, *names: str) -> Path:
    """An install at `where` with executables `names` in its bin/."""
    (where / "bin").mkdir(parents=True, exist_ok=True)
    for name in names:
        (where / "bin" / name).write_text("#!/bin/sh\n")
        (where / "bin" / name).chmod(0o755)
    return where


def _python_install(where: Path) -> Path:
    _tool(where, "python3.12")
    (where / "lib" / "python3.12").mkdir(parents=True)
    (where / "lib" / "python3.12" / "os.py").write_text("")
    return where


def _layouts(home: Path) -> dict[str, Path]:
    """One install of each manager, as each lays it out; the path each is granted at."""
    asdf = _tool(home / ".asdf" / "installs" / "nodejs" / "22.11.0", "node")
    (home / ".asdf" / "shims").mkdir(parents=True)
    (home / ".tool-versions").write_text("nodejs 22.11.0\n")
    mise = _tool(home / ".local" / "share" / "mise" / "installs" / "go" / "1.23.2", "go")
    rustup = _tool(home / ".rustup" / "toolchains" / "stable-x86_64-unknown-linux-gnu", "cargo", "rustc")
    (home / ".rustup" / "settings.toml").write_text('default_toolchain = "stable-x86_64-unknown-linux-gnu"\n')
    cargo = _tool(home / ".cargo", "cargo") / "bin"
    (home / ".cargo" / "credentials.toml").write_text("token")
    go = _tool(home / "sdk" / "go1.22.0", "go")
    (go / "src" / "runtime").mkdir(parents=True)
    brew = _tool(home / ".linuxbrew", "brew")
    (brew / "Cellar").mkdir()
    conda = _tool(home / "miniforge3", "conda")
    (conda / "conda-meta").mkdir()
    sdkman = home / ".sdkman" / "candidates"
    _tool(sdkman / "java" / "21.0.1", "java")
    _tool(home / ".sdkman", "sdkman-init.sh")
    volta = _tool(home / ".volta" / "tools" / "image" / "node" / "20.1.0", "node")
    (home / ".volta" / "bin").mkdir()
    (home / ".volta" / "tools" / "user").mkdir(parents=True)
    (home / ".volta" / "tools" / "user" / "platform.json").write_text('{"node": {"runtime": "20.1.0"}}')
    return {
        "pyenv": _python_install(home / ".pyenv" / "versions" / "3.12.7"),
        "uv": _python_install(home / ".local" / "share" / "uv" / "python" / "cpython-3.12.7-linux-x86_64-gnu"),
        "nvm": _tool(home / ".nvm" / "versions" / "node" / "v22.11.0", "node"),
        "fnm": _tool(home / ".local" / "share" / "fnm" / "node-versions" / "v20.0.0" / "installation", "node"),
        "asdf": asdf, "mise": mise, "rustup": rustup, "cargo": cargo, "go": go, "homebrew": brew, "conda": conda,
        "sdkman": sdkman, "volta": volta,
    }  # fmt: skip


def test_each_managers_install_is_found_checked_and_granted_read_and_execute(home: Path, workspace: Path) -> None:
    expected = _layouts(home)
    _tool(home / ".nvm" / "versions" / "node" / "v0.0.1")  # no bin/node: not an install
    found = toolchain_grants(workspace, protected={})
    granted = {g.path: g.source for g in found.grants}
    for manager, path in expected.items():
        assert granted.get(path.resolve()) == f"detected {manager}", (manager, sorted(granted))
    assert all(g.access == "run" for g in found.grants)
    assert not any(inside(str(home / ".cargo" / "credentials.toml"), g.path) for g in found.grants)
    assert (home / ".nvm" / "versions" / "node" / "v0.0.1").resolve() not in granted


def test_shims_on_the_path_become_the_real_bin_they_select(home: Path, workspace: Path) -> None:
    installs = _layouts(home)
    (home / ".pyenv" / "shims").mkdir()
    (home / ".pyenv" / "version").write_text("3.12\n")  # fuzzy, as pyenv takes it: the newest 3.12.x
    (workspace / ".tool-versions").write_text("nodejs 22.11\n")  # the workspace selects among the installs only
    shims = [home / ".pyenv" / "shims", home / ".asdf" / "shims", home / ".cargo" / "bin", home / ".volta" / "bin"]
    server = os.pathsep.join([*map(str, shims), "/usr/bin"])
    grants = toolchain_grants(workspace, protected={}, server_path=server)
    path = shell_path(server, grants, [workspace], fallback="/bin").split(os.pathsep)
    real = {name: str(p.resolve() / "bin") for name, p in installs.items()}
    assert path == [real["pyenv"], real["asdf"], real["rustup"], str(installs["cargo"]), real["volta"], "/usr/bin",
                    "/bin"]  # fmt: skip


def test_the_deny_list_wins_over_every_grant(home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / ".ssh").mkdir()
    with pytest.raises(GrantError, match=r"~/.ssh \(credentials"):
        toolchain_grants(workspace, read_paths=[home], protected={})
    with pytest.raises(GrantError, match=r"~/.aws"):
        toolchain_grants(workspace, read_paths=[Path("~/.aws/cli")], protected={})
    conda = _tool(home / ".docker", "conda")  # an "install" holding ~/.docker/config.json
    (conda / "conda-meta").mkdir()
    monkeypatch.setenv("CONDA_EXE", str(conda / "bin" / "conda"))
    found = toolchain_grants(workspace, protected={})
    assert all(not inside(str(home / ".docker"), g.path) for g in found.grants)
    assert any("not granting" in n and "~/.docker/config.json" in n for n in found.notices), found.notices
    assert home.resolve() / ".ssh" in found.denied and found.protects(str(home / ".ssh" / "id"))


@needs_landlock
async def test_a_denied_path_a_mount_covers_is_hidden_in_the_view(home: Path, tmp_path: Path) -> None:
    """Serving the home itself: Landlock cannot carve ~/.ssh out of the workspace, so the view hides it."""
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("canary")
    (home / ".netrc").write_text("canary")
    config = ServeConfig.build(workspace=home, data_dir=tmp_path / "data")
    async with open_runtime(config) as rt, client_for(rt, elicitation_callback=YES) as client:
        read = data(await client.call_tool("shell_run", {"command": "cat .ssh/id_ed25519 .netrc; ls -a .ssh"}))
        layers = rt.confinement.bwrap is not None
    assert any(".ssh" in n and "lies inside a mount" in n for n in rt.confinement.notices), rt.confinement.notices
    if layers:  # an empty directory over ~/.ssh, /dev/null over ~/.netrc
        assert "canary" not in read["stdout"] and read["stdout"].split() == [".", ".."], read


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run detection as another uid")
def test_a_path_entry_the_server_may_not_search_is_passed_over() -> None:
    """A non-root server whose PATH names a directory it may not search (/root/.cargo/bin) detects the rest
    instead of failing at start-up with a PermissionError."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    base = Path(tempfile.mkdtemp(prefix="mt-unsearchable-"))  # pytest's tmp root is 0700: uid 65534 cannot enter
    try:
        base.chmod(0o755)
        closed = base / "closed"
        (closed / "bin").mkdir(parents=True)
        closed.chmod(0o700)
        home = base / "home"
        (home / ".local" / "bin").mkdir(parents=True)
        home.chmod(0o755)
        done = _detect_as_nobody(setpriv, home, f"{closed / 'bin'}:/usr/bin")
    finally:
        shutil.rmtree(base)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['~/.local/bin']"  # what lies beyond the closed entry is still found


def _detect_as_nobody(setpriv: str, home: Path, server_path: str) -> subprocess.CompletedProcess[str]:
    script = (
        "import sys; from pathlib import Path; from managed_tools.sandbox.toolchains import detect; "
        "found = detect(Path(sys.argv[1]), {}, Path(sys.argv[1]), sys.argv[2]); "
        "print(sorted(m for _, m in found.installs))"
    )
    argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", script, str(home),
            server_path]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
