"""The sandbox's layers around Landlock (issue 23 item 1; findings N2, N5, N7), through a real MCP client.

Each test runs what an approved command or an upstream would try, and checks the kernel stops it: a process that
outlives its command, a unix socket or UDP datagram outside the domain, a DNS lookup with the network off, the
shell reaching an upstream's private HOME, a fork bomb, a file or a CPU loop past its limit. Where a test needs a
layer this system lacks, it skips and says which (CI's kernel has them all).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import alive, data, gone, upstreams_started
from mcp import Client
from test_permissions import answer, client_for

from managed_tools.sandbox import landlock, layers
from managed_tools.sandbox.confine import FORCE_ENV, shell_policy
from managed_tools.sandbox.policy import Addition, Bind, Grant
from managed_tools.server.config.serve_config import ConfigError, ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.ids import utc_now
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.shell.runner import Job, Output, start_process

pytestmark = pytest.mark.anyio
YES = answer("accept", {"approve": True})
TESTS = Path(__file__).resolve().parents[1]
UPSTREAM = {"command": sys.executable, "args": [str(TESTS / "support" / "upstream_server.py")],
            "readPaths": sorted({sys.prefix, sys.base_prefix, str(TESTS)})}  # fmt: skip


def _in_force() -> set[str]:
    return {layer.name for layer in layers.describe() if layer.in_force} if landlock.abi() else set()


IN_FORCE = _in_force()


def needs(*names: str) -> pytest.MarkDecorator:
    lacking = sorted(set(names) - IN_FORCE)
    return pytest.mark.skipif(bool(lacking), reason=f"this system lacks the sandbox layer(s) {', '.join(lacking)}")


def configured(tmp_path: Path, **config: Any) -> ServeConfig:
    """A workspace and a data dir outside it, with `config` as config.json."""
    workspace, data_dir = tmp_path / "workspace", tmp_path / "data"
    workspace.mkdir()
    data_dir.mkdir()
    (data_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return ServeConfig.build(workspace=workspace, data_dir=data_dir)


async def shell_run(client: Client, command: str, **extra: Any) -> dict[str, Any]:
    return data(await client.call_tool("shell_run", {"command": command, **extra}))


async def started(rt: Runtime) -> AsyncIterator[Client]:
    async with client_for(rt, "legacy", elicitation_callback=YES) as client:
        yield client


# ---- N7: nothing outlives its command, shell or upstream ------------------------------------------------------


@needs("processes")
async def test_a_double_forked_child_ends_with_its_command(tmp_path: Path) -> None:
    async with open_runtime(configured(tmp_path)) as rt, client_for(rt, "legacy", elicitation_callback=YES) as client:
        ran = await shell_run(client, "setsid -f sleep 1001.25; (sleep 1001.5 &) ; setsid -f sh -c 'sleep 1; "
                              "touch late.txt'; echo started")  # fmt: skip
        assert ran["exitCode"] == 0 and ran["stdout"] == "started\n"
        assert await gone("1001.25") and await gone("1001.5")
        await anyio.sleep(1.5)
        assert not (rt.environment.workspace / "late.txt").exists()


@needs("processes")
async def test_the_persistent_shell_takes_its_background_children_with_it(tmp_path: Path) -> None:
    async with open_runtime(configured(tmp_path)) as rt, client_for(rt, "legacy", elicitation_callback=YES) as client:
        ran = data(await client.call_tool("shell_exec", {"command": "setsid -f sleep 1002.25; echo ok"}))
        assert ran["stdout"] == "ok\n" and alive("1002.25")  # the shell lives on, and its namespace with it
        data(await client.call_tool("shell_close", {}))
        assert await gone("1002.25")


@needs("processes")
async def test_an_upstream_takes_what_it_started_with_it(tmp_path: Path) -> None:
    script = f"setsid -f sleep 1003.25; exec {sys.executable} {TESTS / 'support' / 'upstream_server.py'}"
    spec = {**UPSTREAM, "command": "/bin/sh", "args": ["-c", script]}
    async with open_runtime(configured(tmp_path, mcpServers={"probe": spec})) as rt:
        await upstreams_started(rt, "probe")
        async with client_for(rt, "legacy") as client:
            assert "echo: hi" in json.dumps((await client.call_tool("probe__echo", {"text": "hi"})).model_dump())
        assert alive("1003.25")
    assert await gone("1003.25")


# ---- N2: no unix socket, UDP or DNS outside the domain ---------------------------------------------------------


@pytest.fixture
def sockets(tmp_path: Path) -> Iterator[tuple[str, str, int, socket.socket]]:
    """A named unix socket outside the workspace, an abstract one, a UDP port of the host's loopback: all
    listening in this (unsandboxed) test process."""
    named, abstract = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    path, name = str(tmp_path / "outside.sock"), f"managed-tools-test-{os.getpid()}"
    with named, abstract, udp:
        named.bind(path)
        named.listen()
        abstract.bind("\0" + name)
        abstract.listen()
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(0.5)
        yield path, name, udp.getsockname()[1], udp


CONNECT = "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print('connected')"


def connect_unix(target: str) -> str:
    return f"python3 -c \"{CONNECT}\" '{target}'"


def control(target: str) -> None:
    """The same connect, unsandboxed, succeeds: the listeners are real."""
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(target)


@needs("view", "network")
@pytest.mark.parametrize("network", ["off", "on"])
async def test_no_unix_socket_outside_the_domain(tmp_path: Path, sockets: Any, network: str) -> None:
    path, name, _, _ = sockets
    control(path)
    control("\0" + name)
    config = configured(tmp_path).model_copy(update={"shell_network": network == "on"})
    async with open_runtime(config) as rt, client_for(rt, "legacy", elicitation_callback=YES) as client:
        named = await shell_run(client, connect_unix(path))
        abstract = await shell_run(client, f'python3 -c "{CONNECT.replace("sys.argv[1]", repr(chr(0) + name))}"')
        listed = await shell_run(client, f"ls -l {path}")
    assert named["exitCode"] != 0 and "connected" not in named["stdout"]
    assert abstract["exitCode"] != 0 and "connected" not in abstract["stdout"], abstract
    assert "No such file" in listed["stderr"]  # the socket is not even in the domain's view


@needs("network")
async def test_network_off_means_no_udp_and_no_dns(tmp_path: Path, sockets: Any) -> None:
    _, _, port, udp = sockets
    send = f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {port}))"
    await anyio.run_process([sys.executable, "-c", send])
    assert udp.recv(10) == b"x"  # the control: an unsandboxed datagram arrives
    lookup = "import socket; print(socket.getaddrinfo('pypi.org', 443)[0][4][0])"
    host_resolves = (await anyio.run_process([sys.executable, "-c", lookup], check=False)).returncode == 0
    config = configured(tmp_path).model_copy(update={"shell_network": False})
    async with open_runtime(config) as rt, client_for(rt, "legacy", elicitation_callback=YES) as client:
        sent = await shell_run(client, f'python3 -c "{send}"')
        resolved = await shell_run(client, f'python3 -c "{lookup}"')
    with pytest.raises(TimeoutError):
        udp.recv(10)
    assert resolved["exitCode"] != 0 and "gaierror" in resolved["stderr"], (host_resolves, resolved)
    assert sent["exitCode"] in (0, 1)  # sendto may "succeed" into the void or fail unreachable; nothing arrived


@needs("processes")
async def test_proc_shows_only_the_commands_own_processes(tmp_path: Path) -> None:
    async with open_runtime(configured(tmp_path)) as rt, client_for(rt, "legacy", elicitation_callback=YES) as client:
        ran = await shell_run(client, f"ls /proc | grep -c '^[0-9]'; cat /proc/{os.getpid()}/environ")
    count = int(ran["stdout"].split()[0])
    assert count < 10 and "No such file" in ran["stderr"], ran


# ---- N5: each domain sees only its own private dirs ------------------------------------------------------------


@needs("files")
async def test_the_shell_cannot_see_or_write_an_upstreams_home(tmp_path: Path) -> None:
    async with open_runtime(configured(tmp_path, mcpServers={"probe": UPSTREAM})) as rt:
        await upstreams_started(rt, "probe")
        async with client_for(rt, "legacy", elicitation_callback=YES) as client:
            home = data(await client.call_tool("probe__env", {"name": "HOME"}))["result"]
            assert await anyio.Path(home).is_dir()
            planted = Path(home) / "usercustomize.py"
            ran = await shell_run(client, f"ls {home}; echo 'import os' > {planted}; ls {Path(home).parent}")
            reach = await client.call_tool("probe__write_file", {"path": str(rt.confinement.home / "x"), "text": "x"})
        assert ran["exitCode"] != 0 and not planted.exists(), ran
        # Landlock grants it nothing of the private dirs but its own; the mount view does not even have them.
        assert ("No such file" if "view" in IN_FORCE else "Permission denied") in ran["stderr"]
        assert reach.is_error and not (rt.confinement.home / "x").exists()  # nor the upstream the shell's


# ---- resource limits ---------------------------------------------------------------------------------------------

LIMITS = {"processes": 32, "memoryMB": 128, "fileSizeMB": 1, "cpuSeconds": 1}


@needs("cgroup")
async def test_a_fork_bomb_is_bounded_and_reported(tmp_path: Path) -> None:
    config = configured(tmp_path, sandbox={"limits": LIMITS})
    async with open_runtime(config) as rt, client_for(rt, "legacy", elicitation_callback=YES) as client:
        bomb = await shell_run(client, "for i in $(seq 200); do sleep 30 & done; echo spawned", timeoutMs=20_000)
        after = await shell_run(client, "echo fine")
    assert bomb["limit"] == "processes" and "sandbox.limits.processes" in bomb["stderr"], bomb
    assert after["limit"] is None and after["stdout"] == "fine\n"  # the next command has its own group


@needs("limits")
async def test_a_file_past_the_size_limit_is_reported(tmp_path: Path) -> None:
    config = configured(tmp_path, sandbox={"limits": LIMITS})
    async with open_runtime(config) as rt, client_for(rt, "legacy", elicitation_callback=YES) as client:
        big = await shell_run(client, "head -c 3000000 /dev/zero > big.bin")
        shell = data(await client.call_tool("shell_exec", {"command": "head -c 3000000 /dev/zero > big2.bin"}))
    assert big["limit"] == "fileSizeMB" and "sandbox.limits.fileSizeMB" in big["stderr"], big
    assert shell["limit"] == "fileSizeMB", shell
    assert (rt.environment.workspace / "big.bin").stat().st_size == 1 << 20


@needs("limits")
async def test_a_cpu_loop_past_the_cpu_limit_is_reported(tmp_path: Path) -> None:
    config = configured(tmp_path, sandbox={"limits": LIMITS})
    async with open_runtime(config) as rt, client_for(rt, "legacy", elicitation_callback=YES) as client:
        spin = await shell_run(client, 'python3 -c "while True: pass"', timeoutMs=30_000)
    assert spin["limit"] == "cpuSeconds" and spin["status"] == "completed", spin


@needs("cgroup")
async def test_memory_past_the_limit_is_reported(tmp_path: Path) -> None:
    config = configured(tmp_path, sandbox={"limits": LIMITS})
    async with open_runtime(config) as rt, client_for(rt, "legacy", elicitation_callback=YES) as client:
        hog = await shell_run(client, 'python3 -c "x = bytearray(400 << 20); x[::4096] = b\\"x\\" * len(x[::4096])"')
    assert hog["limit"] == "memoryMB" and hog["exitCode"] != 0, hog


def test_bad_limits_in_config_are_one_clear_message(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"invalid at sandbox\.limits\.processes"):
        configured(tmp_path, sandbox={"limits": {"processes": -1}})


# ---- one policy drives every layer ---------------------------------------------------------------------------------


@needs("files", "view")
async def test_one_grant_opens_a_path_in_every_layer(tmp_path: Path) -> None:
    """What the toolchain grants use: a grant added to a policy is seen in the mount view and allowed by Landlock;
    without it the path is in neither."""
    elsewhere = tmp_path / "toolchain"
    elsewhere.mkdir()
    (elsewhere / "tool.txt").write_text("granted\n")
    async with open_runtime(configured(tmp_path)) as rt:
        c = rt.confinement
        base = shell_policy(list(rt.guard.mounts), c.private / "shell", network=False)
        outcomes = [
            await run_in(rt, c.domain(policy), ["cat", str(elsewhere / "tool.txt")])
            for policy in (base, base.with_grants([Grant(str(elsewhere), "read")]))
        ]
    assert outcomes[0][0] != 0 and outcomes[1] == (0, "granted\n"), outcomes


# ---- where a layer is missing ---------------------------------------------------------------------------------------


@needs("files")
async def test_a_forced_missing_layer_is_reported_and_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = configured(tmp_path)
    monkeypatch.setenv(FORCE_ENV, "landlock-only")
    async with open_runtime(config) as rt, client_for(rt) as client:
        described = data(await client.call_tool("environment_describe", {}))["confinement"]["layers"]
    state = {layer["name"]: (layer["inForce"], layer["detail"]) for layer in described}
    assert state["files"][0] and state["limits"][0]
    for name in ("view", "processes", "network", "cgroup"):
        assert state[name] == (False, "forced off by MANAGED_TOOLS_CONFINEMENT=landlock-only"), state


@needs("files")
def test_require_confinement_names_the_missing_layers(tmp_path: Path) -> None:
    config = configured(tmp_path)
    env = {**os.environ, FORCE_ENV: "landlock-only"}
    argv = [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(config.workspace),
            "--data-dir", str(config.data_dir), "--require-confinement"]  # fmt: skip
    refused = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                             env=env)  # fmt: skip
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "missing: view" in refused.stderr and "processes" in refused.stderr, refused.stderr
    started = subprocess.run(argv[:-1], check=False, capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, env=env)  # fmt: skip
    assert started.returncode == 0 and "missing: view" in started.stderr, started.stderr  # the start-up log says so


@needs("cgroup")
async def test_groups_a_dead_server_left_are_removed_at_start_up(tmp_path: Path) -> None:
    async with open_runtime(configured(tmp_path)) as rt:
        assert rt.confinement.cgroups is not None
        bases = [h.parent.parent for h in rt.confinement.cgroups.hierarchies]
    stale = [base / "managed-tools-4194305-dead" for base in bases]  # above the largest pid_max: no such process
    for group in stale:
        (group / "g1").mkdir(parents=True, exist_ok=True)
    (tmp_path / "again").mkdir()
    async with open_runtime(configured(tmp_path / "again")):
        assert not any(group.exists() for group in stale)


@needs("view", "network")
async def test_an_addition_brings_one_socket_into_a_proxied_domain(tmp_path: Path, sockets: Any) -> None:
    """What the egress proxy plugs in through: a network namespace of its own ("proxied"), one unix socket bound in,
    an environment variable naming it, a prefix the program runs behind. The bound socket answers; the host's
    other socket and its loopback do not."""
    path = sockets[0]
    proxy = tmp_path / "proxy.sock"
    with socket.socket(socket.AF_UNIX) as listening, socket.socket() as tcp:
        listening.bind(str(proxy))
        listening.listen()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        port = tcp.getsockname()[1]  # the host's: the domain's loopback is its own
        async with open_runtime(configured(tmp_path)) as rt:
            inside = "/run/managed-tools/egress.sock"
            addition = Addition(binds=(Bind(str(proxy), inside),), env=(("EGRESS_SOCKET", inside),),
                                prefix=("/usr/bin/env", "MARK=behind-the-prefix"))  # fmt: skip
            base = shell_policy(list(rt.guard.mounts), rt.confinement.private / "shell", network=False)
            domain = rt.confinement.domain(dataclasses.replace(base, network="proxied", addition=addition))
            script = (f'import os,socket; s=socket.socket(socket.AF_UNIX); s.connect(os.environ["EGRESS_SOCKET"]); '
                      f'print("proxy", os.environ["MARK"])\nfor target in ({path!r},):\n try:\n  '
                      f'socket.socket(socket.AF_UNIX).connect(target); print("reached", target)\n except OSError: '
                      f'pass\ntry:\n socket.create_connection(("127.0.0.1", {port}), timeout=2); print("tcp")\n'
                      f'except OSError as e: print("no tcp", type(e).__name__)')  # fmt: skip
            out = await run_in(rt, domain, ["python3", "-c", script])
    assert out == (0, "proxy behind-the-prefix\nno tcp ConnectionRefusedError\n"), out


async def run_in(rt: Runtime, domain: Any, argv: list[str]) -> tuple[int | None, str]:
    job = Job("0" * 16, "s", "shell", argv[0], argv[1:], "/workspace", utc_now(), Output(4000), Output(4000))

    async def done(_: Job) -> None:
        return None

    await start_process(job, argv, cwd=str(rt.environment.workspace), env={"PATH": "/usr/bin:/bin"}, limit_s=20,
                        on_done=done, confine=domain)  # fmt: skip
    await job.recorded.wait()
    return job.exit_code, job.stdout.text()[0] + job.stderr.text()[0]
