"""Each principal's share of a limit the server's principals hold together.

With OAuth several principals use one server, and its limits (open MCP sessions and SSE streams, one-time pages)
are shared: without a share one principal could take all of a limit and leave the others refused, or, for pages,
push their open questions out. So each OAuth principal holds at most a quarter of each limit; what is beyond its
share is refused with a clear error (HTTP 503, or a denied call for a page), never taken from another principal.
The local principal (stdio, the static token, no token) is the only one on its server and holds the whole limit.
"""

from __future__ import annotations

from managed_tools.stores.sessions import LOCAL_OWNER

SHARE_DIVISOR = 4


def fair_share(limit: int) -> int:
    """How much of `limit` one OAuth principal may hold (at least one)."""
    return max(1, limit // SHARE_DIVISOR)


def share_of(owner: str, limit: int) -> int:
    """How much of `limit` `owner` may hold: all of it for the local principal, else its fair share."""
    return limit if owner == LOCAL_OWNER else fair_share(limit)
