"""Request headers read straight from the ASGI scope, for the checks every request passes (server/http/transport.py).

One pass over the raw header list, with names given as the lower-case bytes the ASGI server hands over, and no
`starlette.datastructures.Headers` built (and its list copied) in each middleware. Values are decoded as Starlette
decodes them (latin-1), and of a repeated header the first counts, as with `Headers.get`.
"""

from __future__ import annotations

from starlette.types import Scope


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


def headers(scope: Scope, names: frozenset[bytes]) -> dict[bytes, str]:
    """The first value of each of `names` the request has."""
    found: dict[bytes, str] = {}
    for key, value in scope["headers"]:
        if key in names and key not in found:
            found[key] = value.decode("latin-1")
    return found
