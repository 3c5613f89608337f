"""URLs the server itself calls (an OAuth issuer, a model provider): https, or plain http on a loopback host."""

from __future__ import annotations

import ipaddress
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _served_url(value: str) -> str:
    """An https URL (http only on a loopback host, for local issuers and tests), without query or fragment."""
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
    except ValueError:
        raise ValueError(f"{value!r} is not a URL") from None
    if parts.scheme not in ("https", "http") or not host or parts.query or parts.fragment or parts.username:
        raise ValueError(f"{value!r} is not an http(s) URL without query, fragment or credentials")
    if parts.scheme == "http" and not is_loopback(host):
        raise ValueError(f"{value!r} must use https (plain http only on a loopback host)")
    return value


ServedUrl = Annotated[str, AfterValidator(_served_url)]
