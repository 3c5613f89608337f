"""Network egress through the domain allowlist (issue 23, item 1: "network on means egress through a domain
allowlist"): the proxy on its own socket, then `shell_run` in its network namespace through a real MCP client.

Everything stays on this machine's loopback. The proxy's upstream step is replaced in most tests by one that maps
every allowed test name (`*.test`, never resolvable) to a local HTTP server; the step it replaces (resolve, check
the address, connect) is tested on its own with `localhost`, which it must refuse.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import os
import shlex
import shutil
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ERAS, data, error_text
from pydantic import ValidationError
from test_permissions import answer, client_for
from test_upstream import PROBE, serving

from managed_tools.sandbox import bwrap, landlock
from managed_tools.sandbox.confine import FORCE_ENV
from managed_tools.sandbox.egress import (
    NOT_LISTED,
    Channel,
    Egress,
    Limits,
    Match,
    NetworkConfig,
    Streams,
    is_local,
    match,
    reach,
)
from managed_tools.server.config.config_files import read_config_files
from managed_tools.server.config.serve_config import ConfigError, ServeConfig, load_user_config
from managed_tools.server.config.user_config import SandboxConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import overview
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio
ALLOWED = ("allowed.test", "*.pkgs.test")


def _sandbox_missing() -> str | None:
    if os.environ.get("CI") == "true":
        return None  # CI has every layer (.ci/run installs bubblewrap): a missing one fails there
    if landlock.abi() == 0:
        return "this kernel offers no Landlock"
    try:
        bwrap.find()
    except bwrap.BwrapUnavailable as exc:
        return str(exc)
    return None


needs_sandbox = pytest.mark.skipif(_sandbox_missing() is not None, reason=str(_sandbox_missing()))


BIG = bytes(range(256)) * 4096  # 1 MiB: many times the bridge's and the proxy's buffers


class Web:
    """A plain HTTP server on 127.0.0.1 that answers with the Host it was asked for and keeps each request head."""

    def __init__(self) -> None:
        self.heads: list[str] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        self.heads.append(head)
        host = next((line[5:].strip() for line in head.split("\r\n") if line.lower().startswith("host:")), "?")
        body = BIG if head.startswith("GET /big ") else f"hello from {host}".encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    async def opener(self, host: str, port: int, how: Match) -> Streams:
        """The proxy's upstream step for tests: every allowed name is this server."""
        return await asyncio.open_connection("127.0.0.1", self.port)


@pytest.fixture
async def web() -> AsyncIterator[Web]:
    site = Web()
    server = await asyncio.start_server(site.handle, "127.0.0.1", 0)
    site.port = server.sockets[0].getsockname()[1]
    async with server:
        yield site


@pytest.fixture
def egress(web: Web) -> Iterator[Egress]:
    proxy = Egress(NetworkConfig(allowed_domains=list(ALLOWED)), opener=web.opener)
    yield proxy
    proxy.close()


async def ask(channel: Channel, request: bytes) -> bytes:
    """Send `request` through the channel's socket and read until the proxy or the server closes."""
    reader, writer = await asyncio.open_unix_connection(str(channel.path))
    writer.write(request)
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


# ---- the allowlist ---------------------------------------------------------------------------------------------


def test_allowed_domains_are_names_and_wildcards() -> None:
    config = NetworkConfig.model_validate({"allowedDomains": ["PyPI.org.", "*.PythonHosted.org"]})
    assert config.allowed_domains == ("pypi.org", "*.pythonhosted.org")
    assert NetworkConfig().allowed_domains == ()  # empty by default: nothing is reachable
    for bad in ["10.0.0.1", "::1", "127.1", "2130706433", "*", "*.com", "exa mple.com", "a..b", "-a.com", "*.*.a.b"]:
        with pytest.raises(ValidationError, match="domain"):
            NetworkConfig(allowed_domains=[bad])


def test_config_json_takes_the_allowlist_and_names_a_bad_entry(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"sandbox": {"network": {"allowedDomains": ["pypi.org"]}}}))
    assert load_user_config(read_config_files(tmp_path, {})).sandbox.network.allowed_domains == ("pypi.org",)
    (tmp_path / "config.json").write_text(json.dumps({"sandbox": {"network": {"allowedDomains": ["1.2.3.4"]}}}))
    with pytest.raises(ConfigError, match=r"sandbox\.network\.allowedDomains\.0"):
        load_user_config(read_config_files(tmp_path, {}))


def test_a_wildcard_is_subdomains_only() -> None:
    patterns = ("pypi.org", "*.example.com")
    assert match(patterns, "pypi.org") == "exact"
    assert match(patterns, "files.example.com") == "wildcard"
    assert match(patterns, "a.b.example.com") == "wildcard"
    for other in ["example.com", "evilexample.com", "example.com.evil.test", "www.pypi.org", "pypi.org.evil"]:
        assert match(patterns, other) is None, other


@pytest.mark.parametrize(
    ("address", "expected"),
    [("93.184.215.14", "public"), ("2606:4700::1", "public"), ("10.1.2.3", "private"), ("192.168.0.9", "private"),
     ("172.16.0.1", "private"), ("100.64.0.1", "private"), ("fd00::1", "private"), ("127.0.0.1", "never"),
     ("127.8.9.10", "never"), ("::1", "never"), ("::ffff:127.0.0.1", "never"), ("169.254.169.254", "never"),
     ("fe80::1%eth0", "never"), ("0.0.0.0", "never"), ("::", "never"), ("224.0.0.1", "never"),
     ("240.0.0.1", "never")],
)  # fmt: skip
def test_which_addresses_a_name_may_resolve_to(address: str, expected: str) -> None:
    assert reach(address) == expected


def test_this_machines_own_addresses_are_never_reached() -> None:
    """Told apart by binding (nothing is sent): 192.0.2.1 (TEST-NET-1) is nobody's here, 127.0.0.1 is ours."""
    assert is_local(ipaddress.ip_address("127.0.0.1")) and not is_local(ipaddress.ip_address("192.0.2.1"))


# ---- the proxy on its socket -----------------------------------------------------------------------------------


async def test_connect_to_an_allowed_name_tunnels(egress: Egress, web: Web) -> None:
    channel = await egress.open_channel()
    try:
        answer = await ask(channel, b"CONNECT files.pkgs.test:443 HTTP/1.1\r\nHost: x\r\n\r\n"
                                    b"GET /in-tunnel HTTP/1.1\r\nHost: files.pkgs.test\r\n\r\n")  # fmt: skip
    finally:
        await channel.close()
    assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK")
    assert answer.endswith(b"hello from files.pkgs.test")
    assert web.heads[0].startswith("GET /in-tunnel HTTP/1.1") and channel.blocked() == []
    assert not channel.path.exists()


async def test_plain_http_goes_upstream_in_origin_form_without_proxy_headers(egress: Egress, web: Web) -> None:
    channel = await egress.open_channel()
    try:
        answer = await ask(
            channel,
            b"GET http://allowed.test:8080/a?b=1 HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: Basic eDp5\r\n"
            b"Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\n",
        )
    finally:
        await channel.close()
    assert answer.endswith(b"hello from allowed.test:8080")
    lines = web.heads[0].split("\r\n")
    assert lines[0] == "GET /a?b=1 HTTP/1.1"
    assert {"Host: allowed.test:8080", "X-Keep: 2", "Connection: close"} <= set(lines)
    assert not any(line.lower().startswith(("proxy-", "x-drop", "host: evil")) for line in lines)


async def test_every_refusal_is_answered_and_recorded_by_domain(egress: Egress, web: Web) -> None:
    channel = await egress.open_channel()
    try:
        attempts = [b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n", b"GET http://Evil.test/x HTTP/1.1\r\n\r\n",
                    b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n", b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n",
                    b"CONNECT [::1]:8765 HTTP/1.1\r\n\r\n", b"CONNECT pkgs.test:443 HTTP/1.1\r\n\r\n"]  # fmt: skip
        answers = [await ask(channel, attempt) for attempt in attempts]
    finally:
        await channel.close()
    assert all(a.startswith(b"HTTP/1.1 403 Forbidden") and b"X-Proxy-Error: blocked-by-allowlist" in a for a in answers)
    assert b"evil.test: not in sandbox.network.allowedDomains" in answers[0]
    assert channel.blocked() == [
        f"evil.test:443 ({NOT_LISTED})",
        f"evil.test:80 ({NOT_LISTED})",
        "127.0.0.1:22 (an address or not a domain name; the proxy connects to listed names only)",
        "::1:8765 (an address or not a domain name; the proxy connects to listed names only)",
        f"pkgs.test:443 ({NOT_LISTED})",  # *.pkgs.test is its subdomains, not itself
    ]
    assert web.heads == []
    assert channel.take_blocked() and channel.blocked() == []


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [(b"hello\r\n\r\n", b"400"), (b"GET https://allowed.test/ HTTP/1.1\r\n\r\n", b"400"),
     (b"CONNECT allowed.test HTTP/1.1\r\n\r\n", b"400"), (b"CONNECT allowed.test:0 HTTP/1.1\r\n\r\n", b"400"),
     (b"GET http://allowed.test/ HTTP/1.1\r\nBad Header\r\n\r\n", b"400"),
     (b"GET http://allowed.test/ HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n", b"431")],
)  # fmt: skip
async def test_a_malformed_request_gets_one_clear_answer(egress: Egress, request_bytes: bytes, status: bytes) -> None:
    channel = await egress.open_channel()
    try:
        answer = await ask(channel, request_bytes)
    finally:
        await channel.close()
    assert answer.startswith(b"HTTP/1.1 " + status) and b"managed-tools egress:" in answer


async def test_names_resolving_to_loopback_are_refused_even_when_listed(web: Web) -> None:
    """The real upstream step: `localhost` is listed and resolves (from /etc/hosts) to this machine, where the
    server's own ports are: refused, and the local server sees nothing."""
    proxy = Egress(NetworkConfig(allowed_domains=["localhost"]))
    channel = await proxy.open_channel()
    try:
        answer = await ask(channel, f"CONNECT localhost:{web.port} HTTP/1.1\r\n\r\n".encode())
    finally:
        await channel.close()
        proxy.close()
    assert answer.startswith(b"HTTP/1.1 403")
    reason = "resolves to a loopback, link-local, reserved or this machine's own address"
    assert channel.blocked() == [f"localhost:{web.port} ({reason})"]
    assert web.heads == []


async def test_connections_are_bounded_in_number_and_time(web: Web) -> None:
    limits = Limits(max_connections=1, header_timeout_s=0.3, idle_timeout_s=0.5)
    proxy = Egress(NetworkConfig(allowed_domains=list(ALLOWED)), limits=limits, opener=web.opener)
    channel = await proxy.open_channel()
    try:
        reader, writer = await asyncio.open_unix_connection(str(channel.path))
        writer.write(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert (await ask(channel, b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 503")
        assert await asyncio.wait_for(reader.read(), 5) == b""  # idle: the tunnel is closed
        writer.close()
        silent_reader, silent = await asyncio.open_unix_connection(str(channel.path))
        assert await asyncio.wait_for(silent_reader.read(), 5) == b""  # no request head in time
        silent.close()
    finally:
        await channel.close()
        proxy.close()


async def test_closing_a_channel_ends_its_tunnels(egress: Egress) -> None:
    channel = await egress.open_channel()
    reader, writer = await asyncio.open_unix_connection(str(channel.path))
    writer.write(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")
    await reader.readuntil(b"\r\n\r\n")
    await channel.close()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert not channel.path.exists()
    writer.close()


# ---- shell_run, sandboxed, through a real MCP client -----------------------------------------------------------


@pytest.fixture
def config(workspace: Path) -> ServeConfig:
    """shell_run runs unasked here: what is under test is where its commands can connect."""
    return ServeConfig.build(workspace=workspace, data_dir=workspace.parent / "data").model_copy(
        update={
            "policy": {"shell_run": "always_allow", "shell_exec": "always_allow"},
            "sandbox": SandboxConfig(network=NetworkConfig(allowed_domains=list(ALLOWED))),
        }
    )


@pytest.fixture
async def rt(config: ServeConfig, web: Web) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as runtime:
        egress = runtime.confinement.egress
        assert egress is not None, runtime.confinement.egress_reason
        egress.opener = web.opener
        yield runtime


FETCH = """
import http.client, sys, urllib.request
print(urllib.request.urlopen("http://allowed.test/plain", timeout=10).read().decode())
tunnel = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)  # HTTPS_PROXY's CONNECT, without the TLS
tunnel.set_tunnel("files.pkgs.test", 443)
tunnel.request("GET", "/tunnelled")
print(tunnel.getresponse().read().decode())
for url in ("http://evil.test/", "https://evil.test/", "https://also.evil.test:8443/"):
    try:
        urllib.request.urlopen(url, timeout=10)
    except OSError as exc:
        print("refused", url, file=sys.stderr)
"""


@needs_sandbox
@pytest.mark.parametrize("mode", ERAS)
async def test_shell_run_reaches_allowed_domains_and_names_the_blocked(rt: Runtime, web: Web, mode: str) -> None:
    async with client_for(rt, mode) as client:
        result = data(await client.call_tool("shell_run", {"command": f"python3 -c {shlex.quote(FETCH)}"}))
    assert result["stdout"] == "hello from allowed.test\nhello from files.pkgs.test:443\n", result["stderr"]
    assert result["networkBlocked"] == [f"evil.test:80 ({NOT_LISTED})", f"evil.test:443 ({NOT_LISTED})",
                                        f"also.evil.test:8443 ({NOT_LISTED})"]  # fmt: skip
    assert result["stderr"].count("refused") == 3
    assert "[managed-tools] network blocked: evil.test:80 (not in sandbox.network.allowedDomains)" in result["stderr"]
    async with rt.db.read() as tx:  # the completion keeps them whole, for the dashboard's refusals
        shown = [r for r in await overview.refusals(tx) if r.kind == "network"]
    assert shown and shown[0].detail.startswith(f"evil.test:80 ({NOT_LISTED}); evil.test:443")
    assert [h.split("\r\n")[0] for h in web.heads] == ["GET /plain HTTP/1.1", "GET /tunnelled HTTP/1.1"]


@needs_sandbox
@pytest.mark.parametrize("mode", ERAS)
async def test_the_shell_exec_question_names_the_proxy_variables_as_the_servers(config: ServeConfig, mode: str) -> None:
    """Issue 38, item 8: the live shell's HTTP_PROXY and the rest were set by the server at its spawn; the
    question says so, and lists only what commands exported as theirs."""
    seen: list[str] = []
    asked = config.model_copy(update={"policy": {}})  # shell_exec asks a person again
    async with (
        open_runtime(asked) as runtime,
        client_for(runtime, mode, elicitation_callback=answer("accept", {"approve": True}, seen)) as client,
    ):
        data(await client.call_tool("shell_exec", {"command": "export COLOR=blue"}))
        assert data(await client.call_tool("shell_exec", {"command": "echo $COLOR"}))["stdout"] == "blue\n"
    exported = next(line for line in seen[1].splitlines() if "by earlier commands" in line)
    assert exported.endswith(": COLOR"), exported
    server_set = "Set by the server, pointing at its egress proxy (the domain allowlist): HTTP_PROXY, HTTPS_PROXY"
    assert server_set in seen[0] and server_set in seen[1]


PARALLEL = """
import concurrent.futures, hashlib, urllib.request
def fetch(i):
    return hashlib.sha256(urllib.request.urlopen("http://allowed.test/big", timeout=30).read()).hexdigest()
with concurrent.futures.ThreadPoolExecutor(12) as pool:
    print(" ".join(sorted(set(pool.map(fetch, range(24))))))
"""


@needs_sandbox
async def test_many_large_transfers_at_once_go_through_the_bridge_whole(rt: Runtime) -> None:
    """Twelve connections at a time, 1 MiB each: the bridge's poll loop and buffers and the proxy's relay, under
    back-pressure, lose and mix nothing."""
    async with client_for(rt) as client:
        result = data(await client.call_tool("shell_run", {"command": f"python3 -c {shlex.quote(PARALLEL)}",
                                                            "timeoutMs": 60_000}))  # fmt: skip
    assert result["stdout"] == hashlib.sha256(BIG).hexdigest() + "\n", result["stderr"]


@needs_sandbox
async def test_the_persistent_shell_goes_out_through_its_own_channel(rt: Runtime) -> None:
    """One channel for the shell's life; each command's result names only what that command was refused."""
    fetch = 'python3 -c "import urllib.request as u; print(u.urlopen(\\"http://{}/\\", timeout=10).read().decode())"'
    async with client_for(rt) as client:
        first = data(await client.call_tool("shell_exec", {"command": fetch.format("evil.test")}))
        second = data(await client.call_tool("shell_exec", {"command": fetch.format("allowed.test")}))
        proxy = rt.confinement.egress
        assert proxy is not None and len(list(proxy.directory.iterdir())) == 1  # the shell's channel, open
        await client.call_tool("shell_close", {})
    assert first["networkBlocked"] == [f"evil.test:80 ({NOT_LISTED})"] and first["exitCode"] == 1
    assert second["networkBlocked"] == [] and second["stdout"] == "hello from allowed.test\n"
    assert list(proxy.directory.iterdir()) == []


@needs_sandbox
async def test_the_command_behind_the_bridge_keeps_default_signals(rt: Runtime) -> None:
    """The bridge is a Python process, and Python ignores SIGPIPE and SIGXFSZ: the command it execs must not
    inherit that (`yes | head` would complain of a broken pipe, a file past the size limit go unreported)."""
    async with client_for(rt) as client:
        result = data(await client.call_tool("shell_run", {"command": "yes | head -c 2"}))
    assert result["stdout"] == "y\n" and result["stderr"] == "", result["stderr"]


@needs_sandbox
async def test_an_upstream_server_goes_out_through_the_proxy_too(
    workspace: Path, web: Web, caplog: pytest.LogCaptureFixture
) -> None:
    """A stdio upstream with the network on: the allowed name answers, another is refused and logged by name."""
    servers = {"probe": PROBE}
    network = {"network": {"allowedDomains": list(ALLOWED)}}
    async with serving(workspace, workspace.parent, servers, sandbox=network) as runtime:
        egress = runtime.confinement.egress
        assert egress is not None
        egress.opener = web.opener
        async with client_for(runtime) as client:
            allowed = await client.call_tool("probe__fetch", {"url": "http://allowed.test/from-upstream"})
            refused = await client.call_tool("probe__fetch", {"url": "http://evil.test/"})
    assert "hello from allowed.test" in json.dumps(data(allowed))
    assert "reported an error from fetch" in error_text(refused)
    assert f"upstream probe: network blocked: evil.test:80 ({NOT_LISTED})" in caplog.text


@needs_sandbox
async def test_curl_goes_through_the_proxy(rt: Runtime) -> None:
    if shutil.which("curl") is None:
        pytest.skip("no curl on this machine")
    command = "curl -sS -p http://allowed.test/by-curl; echo; curl -sS https://evil.test/; echo curl=$?"
    async with client_for(rt) as client:
        result = data(await client.call_tool("shell_run", {"command": command}))
    assert result["stdout"] == "hello from allowed.test\ncurl=56\n"
    assert result["networkBlocked"] == [f"evil.test:443 ({NOT_LISTED})"]


ESCAPES = """
import json, socket
seen = {}
try:
    socket.create_connection(("127.0.0.1", {tcp}), timeout=5)
    seen["tcp"] = "connected"
except OSError as exc:
    seen["tcp"] = type(exc).__name__
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.sendto(b"out", ("127.0.0.1", {udp}))
try:
    socket.getaddrinfo("allowed.test", 443)
    seen["dns"] = "resolved"
except OSError as exc:
    seen["dns"] = type(exc).__name__
seen["interfaces"] = [name for _, name in socket.if_nameindex()]
print(json.dumps(seen))
"""


HostSockets = tuple[socket.socket, socket.socket]


@pytest.fixture
def host_sockets() -> Iterator[HostSockets]:
    """A TCP listener and a UDP socket on the host's loopback, which a sandboxed command must not reach."""
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        udp.bind(("127.0.0.1", 0))
        udp.setblocking(False)
        yield tcp, udp


@needs_sandbox
async def test_nothing_but_the_proxy_is_reachable(
    rt: Runtime, host_sockets: tuple[socket.socket, socket.socket]
) -> None:
    tcp, udp = host_sockets
    script = ESCAPES.replace("{tcp}", str(tcp.getsockname()[1])).replace("{udp}", str(udp.getsockname()[1]))
    async with client_for(rt) as client:
        result = data(await client.call_tool("shell_run", {"command": f"python3 -c {shlex.quote(script)}"}))
    seen: dict[str, Any] = json.loads(result["stdout"])
    assert seen == {"tcp": "ConnectionRefusedError", "dns": "gaierror", "interfaces": ["lo"]}, result
    with pytest.raises(BlockingIOError):
        udp.recv(16)  # the datagram went to the namespace's own loopback, not here
    tcp.setblocking(False)
    with pytest.raises(BlockingIOError):
        tcp.accept()


@needs_sandbox
async def test_environment_describe_tells_the_network(rt: Runtime) -> None:
    async with client_for(rt) as client:
        network = data(await client.call_tool("environment_describe", {}))["confinement"]["network"]
    assert network == {"mode": "proxied", "allowedDomains": list(ALLOWED), "reason": None}


async def test_without_a_namespace_the_network_is_direct_and_says_why(
    config: ServeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FORCE_ENV, "landlock-only")  # Landlock, and no bubblewrap to make a namespace with
    async with open_runtime(config) as runtime, client_for(runtime) as client:
        network = data(await client.call_tool("environment_describe", {}))["confinement"]["network"]
        assert runtime.confinement.egress is None
    if landlock.abi() == 0:
        assert network["mode"] == "direct"
        return
    assert network == {"mode": "direct", "allowedDomains": [], "reason": network["reason"]}
    assert network["reason"].startswith("no network namespace: forced off by")
    assert any("not filtered by sandbox.network.allowedDomains" in n for n in runtime.confinement.notices)


async def test_network_off_is_off(config: ServeConfig) -> None:
    async with open_runtime(config.model_copy(update={"shell_network": False})) as runtime:
        async with client_for(runtime) as client:
            network = data(await client.call_tool("environment_describe", {}))["confinement"]["network"]
        assert runtime.confinement.egress is None
    assert network == {"mode": "off", "allowedDomains": [], "reason": None}
