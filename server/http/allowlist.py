"""Exact Host and Origin allowlists: each value is parsed, then scheme, host and port are compared whole.

The SDK's TransportSecurityMiddleware treats `name:*` as a string prefix (`name:`), so `Host: localhost:evil.example`
and `Origin: http://localhost:8765.evil.example` pass it. Here a value is first parsed against the only shapes
a Host or Origin header may take (a host name, an IPv4 address or a bracketed IPv6 address, then an optional
numeric port; an Origin starts with `http://` or `https://`); anything else is refused. Allowlist entries take
the same shapes, with `*` as the port meaning any port; an entry without a port matches only a header without one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9])?)"
HOST = re.compile(_NAME + r"(?::(?P<port>\d{1,5}))?")
ORIGIN = re.compile(r"(?P<scheme>https?)://" + HOST.pattern)
HOST_ENTRY = re.compile(_NAME + r"(?::(?P<port>\d{1,5}|\*))?")
ORIGIN_ENTRY = re.compile(r"(?P<scheme>https?)://" + HOST_ENTRY.pattern)
ANY_PORT = "*"
MEMO_CAP = 1024  # header values remembered with their verdict; a client can send any, so the memo is bounded


@dataclass(frozen=True)
class Address:
    """A parsed Host or Origin (scheme "" for a Host); port None means none was given, "*" any (entries only)."""

    scheme: str
    host: str
    port: str | None

    def admits(self, other: Address) -> bool:
        return self.scheme == other.scheme and self.host == other.host and self.port in (ANY_PORT, other.port)


def _parse(pattern: re.Pattern[str], value: str) -> Address | None:
    match = pattern.fullmatch(value)
    if match is None:
        return None
    port = match["port"]
    if port is not None and port != ANY_PORT:
        if int(port) > 65535:
            return None
        port = str(int(port))  # `:08765` is port 8765
    scheme = match.groupdict().get("scheme") or ""
    return Address(scheme=scheme.lower(), host=match["host"].lower(), port=port)


def host_entry(value: str) -> Address | None:
    """An `--allowed-host` value: `name`, `name:port` or `name:*`."""
    return _parse(HOST_ENTRY, value)


def origin_entry(value: str) -> Address | None:
    """An `--allowed-origin` value: `scheme://name`, `scheme://name:port` or `scheme://name:*`."""
    return _parse(ORIGIN_ENTRY, value)


class Allowlist:
    """The Host and Origin values a server answers to. Every request sends the same few values, so each verdict
    is remembered by the exact header value (the verdict depends on nothing else): a request is then one dict
    look-up, not a parse."""

    def __init__(self, hosts: tuple[str, ...], origins: tuple[str, ...]) -> None:
        self._hosts = [_required(host_entry(value), value) for value in hosts]
        self._origins = [_required(origin_entry(value), value) for value in origins]
        self._host_verdicts: dict[str, bool] = {}
        self._origin_verdicts: dict[str, bool] = {}

    def admits_host(self, value: str | None) -> bool:
        return value is not None and _verdict(self._host_verdicts, HOST, self._hosts, value)

    def admits_origin(self, value: str | None) -> bool:
        """An absent Origin passes (clients that are not browsers send none); a present one must be listed."""
        return value is None or _verdict(self._origin_verdicts, ORIGIN, self._origins, value)


def _verdict(verdicts: dict[str, bool], pattern: re.Pattern[str], entries: list[Address], value: str) -> bool:
    """Whether an entry admits `value`, parsed with `pattern`; remembered in `verdicts` (bounded)."""
    verdict = verdicts.get(value)
    if verdict is None:
        parsed = _parse(pattern, value)
        verdict = parsed is not None and any(entry.admits(parsed) for entry in entries)
        if len(verdicts) >= MEMO_CAP:
            verdicts.clear()
        verdicts[value] = verdict
    return verdict


def _required(entry: Address | None, value: str) -> Address:
    if entry is None:  # HttpConfig validates its allowlists, so this is a programming error
        raise ValueError(f"not a valid allowlist entry: {value!r}")
    return entry
