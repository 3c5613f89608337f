"""Network egress for sandboxed commands: an HTTP proxy that lets through only the allowlisted domains.

A command with network runs in a network namespace of its own (only a loopback interface), so it can open no
connection to anything outside. Its one way out is a unix socket of this proxy, bind-mounted in and bridged to
127.0.0.1:3128 inside (sandbox/netbridge.c), where HTTP_PROXY and HTTPS_PROXY point. The proxy takes
`CONNECT host:port` (HTTPS, and any TLS) and absolute-URI `http://` requests, and connects only to a host that
config `sandbox.network.allowedDomains` lists (docs/decisions/egress-allowlist-proxy.md):

* names only: an IP literal is refused, as is every name not listed (`*.example.com` is any subdomain of
  example.com, not example.com itself);
* resolved here, on the host side, and connected to the very address that was checked (no second lookup to
  rebind): a loopback, link-local, unspecified, multicast or reserved address, or one of this machine's own, is
  refused whatever the list says (the server's own ports, a cloud's metadata service); a private one (RFC 1918,
  ULA, CGNAT) only unless the name itself is listed exactly, not through a wildcard;
* bounded: concurrent connections, header size, header, connect and idle timeouts.

Each command gets a channel (a socket of its own), so every refusal is told to the command that tried it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from managed_tools.sandbox import refusal_count
from managed_tools.sandbox.launcher import compiled
from managed_tools.sandbox.policy import Addition, Bind, Grant, SandboxPolicy

CONFIG_KEY = "sandbox.network.allowedDomains"
NOT_LISTED = f"not in {CONFIG_KEY}"
LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
MAX_NAME = 253
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux
LINGER_S = 1.0  # reading what a refused client still sends, before closing
MAX_REFUSALS = 50  # kept per channel; more are counted
CHUNK = 65536
Match = Literal["exact", "wildcard"]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# Opens a connection to an allowed `host`:`port` (how it matched: a private address needs an exact entry).
Opener = Callable[[str, int, Match], Awaitable[Streams]]


def domain_name(value: str) -> str | None:
    """`value` as a DNS name (lower case, no trailing dot); None for an IP literal or anything else."""
    name = value.lower().removesuffix(".")
    if not name or len(name) > MAX_NAME:
        return None
    labels = name.split(".")
    if not all(LABEL.fullmatch(label) for label in labels) or labels[-1].isdigit():
        return None  # an all-digit last label is an address in some spelling (127.1, 2130706433), never a TLD
    return name


def _pattern(value: str) -> str:
    wildcard = value.startswith("*.")
    name = domain_name(value[2:] if wildcard else value)
    if name is None:
        raise ValueError(f"{value!r} is not a domain name or *.domain (addresses are not allowed)")
    if wildcard and "." not in name:
        raise ValueError(f"{value!r} is too wide: a wildcard takes a domain of two labels or more (*.example.com)")
    return f"*.{name}" if wildcard else name


DomainPattern = Annotated[str, AfterValidator(_pattern)]


class NetworkConfig(BaseModel):
    """config.json `sandbox.network`: where commands with network may connect, through the proxy."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    allowed_domains: tuple[DomainPattern, ...] = Field(
        default=(),
        alias="allowedDomains",
        max_length=1000,
        description="Host names (`pypi.org`) and wildcards (`*.pythonhosted.org`: its subdomains) commands may "
        "reach over HTTP(S); empty: none.",
    )


def match(patterns: tuple[str, ...], host: str) -> Match | None:
    """How `host` (a normalized name) is allowed by `patterns`, if it is."""
    if host in patterns:
        return "exact"
    if any(p.startswith("*.") and host.endswith(p[1:]) for p in patterns):
        return "wildcard"
    return None


def reach(address: str) -> Literal["public", "private", "never"]:
    """Whether a resolved address may be connected to: always, only for an exactly listed name, or never."""
    ip = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is loopback (Python 3.11's IPv6Address does not say so)
    if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return "never"
    if is_local(ip):
        return "never"  # this machine's own address on another interface: where the server may listen too
    return "public" if ip.is_global else "private"


def is_local(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether `ip` is an address of this machine: only a local address can be bound (nothing is sent)."""
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError:
            return False
    return True


class Blocked(Exception):
    """The proxy refuses this destination; the message is the reason shown to the command and in its result."""


class Unreachable(Exception):
    """An allowed destination that could not be reached (no such name, nothing listening)."""


@dataclass(frozen=True)
class Limits:
    max_connections: int = 64  # open at once through the proxy, every command together
    max_header_bytes: int = 16384
    header_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0  # no byte either way for this long ends a connection


@dataclass(frozen=True)
class Refusal:
    host: str  # as the command asked for it, made printable and bounded
    port: int
    reason: str
    at: float  # time.time()

    def __str__(self) -> str:
        return f"{self.host}:{self.port} ({self.reason})"


@dataclass
class Channel:
    """One command's way out: the socket it reaches the proxy through, and what the proxy refused it."""

    path: Path
    refusals: list[Refusal] = field(default_factory=list)
    more: int = 0  # refusals beyond MAX_REFUSALS, counted only
    server: asyncio.Server | None = None
    handlers: set[asyncio.Task[None]] = field(default_factory=set)
    # Told each refusal as it happens (an upstream server's channel logs them: it has no result to carry them).
    notify: Callable[[Refusal], None] | None = None

    async def close(self) -> None:
        """Stop listening and end every connection still open through this channel."""
        if self.server is not None:
            self.server.close()
        for task in list(self.handlers):
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def refuse(self, host: str, port: int, reason: str) -> None:
        refusal_count.counted("network")
        refusal = Refusal(host, port, reason, time.time())
        if len(self.refusals) < MAX_REFUSALS:
            self.refusals.append(refusal)
        else:
            self.more += 1
        if self.notify is not None:
            self.notify(refusal)

    def blocked(self) -> list[str]:
        """Each refused destination once, in the order first tried."""
        lines = list(dict.fromkeys(str(r) for r in self.refusals))
        return [*lines, f"and {self.more} more refused connections"] if self.more else lines

    def take_blocked(self) -> list[str]:
        """`blocked()`, then forgotten: a persistent shell reports each command's own."""
        lines = self.blocked()
        self.refusals, self.more = [], 0
        return lines


def _shown(host: str) -> str:
    return "".join(c if c.isprintable() and not c.isspace() else "?" for c in host[:MAX_NAME].lower()) or "?"


@dataclass(frozen=True)
class Request:
    method: str
    host: str
    port: int
    head: bytes  # what goes upstream first: b"" for CONNECT, else the request rewritten to origin form


class BadRequest(Exception):
    pass


HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
                        "upgrade", "host"})  # fmt: skip
TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def parse_request(head: bytes) -> Request:
    """The request line and headers (latin-1, CRLF, no folding) as a destination and what to send it."""
    lines = head.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ") if lines else []
    if len(parts) != 3 or not TOKEN.fullmatch(parts[0]) or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest("not an HTTP/1.x request line")
    method, target, version = parts
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not TOKEN.fullmatch(name):
            raise BadRequest("a malformed header line")
        headers.append((name, value.strip()))
    if method == "CONNECT":
        authority, _, port = target.rpartition(":")
        return Request(method, authority.removeprefix("[").removesuffix("]"), _port(port), b"")
    try:
        url = urlsplit(target)
        host, url_port = url.hostname or "", url.port or 80
    except ValueError:
        raise BadRequest("a malformed URL") from None
    if url.scheme != "http" or not host:
        raise BadRequest("this proxy takes CONNECT host:port and absolute http:// URLs")
    listed = {value.strip().lower() for name, value in headers if name.lower() == "connection" for value in
              value.split(",")}  # fmt: skip
    kept = [f"{n}: {v}\r\n" for n, v in headers if n.lower() not in HOP_BY_HOP and n.lower() not in listed]
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    authority = host if url_port == 80 else f"{host}:{url_port}"
    rewritten = f"{method} {path} {version}\r\nHost: {authority}\r\n{''.join(kept)}Connection: close\r\n\r\n"
    return Request(method, host, url_port, rewritten.encode("latin-1"))


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise BadRequest("CONNECT takes host:port")
    return int(text)


async def _reply(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: str, message: str, *, blocked: bool = False
) -> None:
    """Answer and close gently: the rest of what the client sent is read (briefly, boundedly) first, since closing
    a socket with unread input resets it, and the client would see a reset instead of this answer."""
    body = f"managed-tools egress: {message}\n".encode()
    extra = "X-Proxy-Error: blocked-by-allowlist\r\n" if blocked else ""
    head = (f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n")  # fmt: skip
    writer.write(head.encode() + body)
    with contextlib.suppress(OSError, TimeoutError, asyncio.LimitOverrunError):
        await writer.drain()
        writer.write_eof()
        deadline = time.monotonic() + LINGER_S
        while await asyncio.wait_for(reader.read(CHUNK), max(deadline - time.monotonic(), 0)):
            pass


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, clock: list[float], idle: float) -> bool:
    """Copy until EOF (passed on as a half-close); False when both ways were idle for `idle` seconds."""
    while True:
        try:
            data = await asyncio.wait_for(src.read(CHUNK), idle)
        except TimeoutError:
            if time.monotonic() - clock[0] >= idle:
                return False
            continue
        if not data:
            if dst.can_write_eof():
                dst.write_eof()
            return True
        clock[0] = time.monotonic()
        dst.write(data)
        await dst.drain()


async def relay(client: Streams, upstream: Streams, idle: float) -> None:
    """Both ways at once until both ends close, either breaks, or nothing moves for `idle` seconds."""
    clock = [time.monotonic()]
    pumps = {asyncio.ensure_future(_pump(client[0], upstream[1], clock, idle)),
             asyncio.ensure_future(_pump(upstream[0], client[1], clock, idle))}  # fmt: skip
    try:
        pending = pumps
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(task.cancelled() or task.exception() is not None or not task.result() for task in done):
                break
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


class Egress:
    """The proxy: one allowlist, a private directory of channel sockets, bounded connections."""

    def __init__(
        self, config: NetworkConfig, *, bridge: str = "", limits: Limits | None = None, opener: Opener | None = None
    ) -> None:
        self.allowed = config.allowed_domains
        self.bridge = bridge  # the compiled bridge a confined program runs behind (`confine`)
        self.limits = limits or Limits()
        self.opener = opener or self.open_upstream  # tests put a local server behind a test name here
        # 0700; bound read-only into the domains it serves (connecting to a socket needs no write access).
        self.directory = Path(os.path.realpath(tempfile.mkdtemp(prefix="mt-egress-")))
        self._connections = 0

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def confine(self, policy: SandboxPolicy) -> SandboxPolicy:
        """`policy` with its network through this proxy: a network namespace of its own (the bwrap layer), the
        bridge in front of its program (granted: run), the proxy variables, and the channel sockets' dir bound in.
        Each spawn names its own channel in SOCKET_ENV."""
        bind = Bind(str(self.directory), str(self.directory))
        prefix = (self.bridge, str(BRIDGE_PORT), "--")
        addition = Addition(binds=(bind,), env=tuple(proxy_env().items()), prefix=prefix)
        return replace(policy.with_grants([Grant(self.bridge, "run")]), network="proxied", addition=addition)

    async def open_channel(self) -> Channel:
        """A socket of its own for one command (or one persistent shell); `Channel.close` ends it and every
        connection through it."""
        # Unguessable: every channel of a domain sits in the one dir it sees, and a command using another's
        # channel would have its refusals told to the wrong command.
        channel = Channel(self.directory / f"{secrets.token_hex(8)}.sock")
        if len(str(channel.path)) > MAX_SOCKET_PATH:
            raise OSError(f"the proxy socket path {channel.path} is too long for a unix socket; set a shorter TMPDIR")

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            channel.handlers.add(task)
            try:
                await self._serve(channel, reader, writer)
            except asyncio.CancelledError:
                pass  # the channel closed: end quietly (asyncio logs a handler that ends cancelled as an error)
            finally:
                channel.handlers.discard(task)

        channel.server = await asyncio.start_unix_server(
            serve, path=str(channel.path), limit=self.limits.max_header_bytes
        )
        return channel

    async def _serve(self, channel: Channel, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self._connections >= self.limits.max_connections:
                await _reply(
                    reader, writer, "503 Service Unavailable", "too many connections through the proxy at once"
                )
                return
            self._connections += 1
            try:
                await self._handle(channel, reader, writer)
            finally:
                self._connections -= 1
        except (OSError, asyncio.IncompleteReadError):
            pass  # the command hung up
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _handle(self, channel: Channel, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.limits.header_timeout_s)
            request = parse_request(head)
        except asyncio.LimitOverrunError:  # no end of the head within the limit
            await _reply(reader, writer, "431 Request Header Fields Too Large", "the request head is too large")
            return
        except BadRequest as exc:
            await _reply(reader, writer, "400 Bad Request", str(exc))
            return
        except TimeoutError:
            return
        host = domain_name(request.host)
        try:
            if host is None:
                raise Blocked("an address or not a domain name; the proxy connects to listed names only")
            how = match(self.allowed, host)
            if how is None:
                raise Blocked(NOT_LISTED)
            upstream = await self.opener(host, request.port, how)
        except Blocked as exc:
            channel.refuse(_shown(host or request.host), request.port, str(exc))
            await _reply(reader, writer, "403 Forbidden", f"{_shown(host or request.host)}: {exc}", blocked=True)
            return
        except Unreachable as exc:
            await _reply(reader, writer, "502 Bad Gateway", str(exc))
            return
        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream[1].write(request.head)
            await relay((reader, writer), upstream, self.limits.idle_timeout_s)
        finally:
            upstream[1].close()

    async def open_upstream(self, host: str, port: int, how: Match) -> Streams:
        """Resolve `host` here and connect to the first address the rules allow (never a second lookup)."""
        loop, timeout = asyncio.get_running_loop(), self.limits.connect_timeout_s
        try:
            infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
        except (OSError, TimeoutError):
            raise Unreachable(f"{host} does not resolve") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        reaches = [reach(a) for a in addresses]
        usable = [a for a, r in zip(addresses, reaches, strict=True)
                  if r == "public" or (r == "private" and how == "exact")]  # fmt: skip
        if not usable and "never" in reaches:
            raise Blocked("resolves to a loopback, link-local, reserved or this machine's own address")
        if not usable:
            raise Blocked(f"resolves to a private address; only an exact entry (not a wildcard) allows {host}")
        for address in usable:
            with contextlib.suppress(OSError, TimeoutError):
                return await asyncio.wait_for(asyncio.open_connection(address, port, limit=CHUNK), timeout)
        raise Unreachable(f"cannot connect to {host}:{port}")


# ---- inside the sandbox ----------------------------------------------------------------------------------------

BRIDGE_PORT = 3128
BRIDGE_SOURCE = Path(__file__).with_name("netbridge.c")
SOCKET_ENV = "MANAGED_TOOLS_EGRESS_SOCKET"  # a spawn's own channel, read (and removed) by the bridge
PROXY_KEYS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
# The command's own loopback (a test server it starts) is its namespace's, never the host's: reached directly.
NO_PROXY = "localhost,127.0.0.1,::1"
PROBE_TIMEOUT_S = 10


def proxy_env() -> dict[str, str]:
    """What points a command's HTTP clients (curl, pip, npm, git, requests, urllib) at the bridge."""
    url = f"http://127.0.0.1:{BRIDGE_PORT}"
    return {**dict.fromkeys(PROXY_KEYS, url), "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}


def bridge(root: Path | None = None) -> str:
    """The compiled bridge (sandbox/netbridge.c), built like the launcher; LauncherError or OSError if it can't be."""
    return str(compiled(BRIDGE_SOURCE, "the network bridge", _bridge_runs, root))


def _bridge_runs(built: Path) -> bool:
    """A fresh build runs the program it is given (no socket named: nothing to forward, and no way out)."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        probe = subprocess.run([str(built), str(BRIDGE_PORT), "--", "/bin/true"], capture_output=True, env={},
                               timeout=PROBE_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)  # fmt: skip
        return probe.returncode == 0
    return False
