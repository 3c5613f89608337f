"""The page server: uvicorn on 127.0.0.1, a port the kernel picks, in the event loop of whatever transport the
MCP server speaks (stdio included). No access log, and uvicorn's log levels left alone: a request line or body
(which may hold a secret) is never logged."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator

import anyio
import uvicorn
from starlette.types import ASGIApp

from managed_tools.server.config import ServeConfig
from managed_tools.server.http_limits import ConnectionLimits, limited_protocol
from managed_tools.server.pages.board import Pages
from managed_tools.server.pages.site import PageSite

LOOPBACK = "127.0.0.1"
LIMITS = ConnectionLimits(header_timeout_seconds=10.0, body_timeout_seconds=10.0, max_connections=64)
log = logging.getLogger("managed_tools.pages")


def pages_for(config: ServeConfig) -> Pages:
    return Pages(for_approvals=config.approvals == "page")


class _PageServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the MCP server's stop ends this one (server/stopping.py)
        yield


@contextlib.asynccontextmanager
async def serving_pages(pages: Pages) -> AsyncIterator[Pages]:
    """Serve `pages` for as long as the block runs; their URLs are valid from the moment it is entered."""
    async with serving_loopback(PageSite(pages)) as authority:
        pages.authority = authority
        log.info("approval and secret pages at %s (one-time links)", pages.origin)
        yield pages


@contextlib.asynccontextmanager
async def serving_loopback(app: ASGIApp) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 at a port the kernel picks, for as long as the block runs; yields the authority
    ("127.0.0.1:PORT"), the only Host the app should answer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        sock.bind((LOOPBACK, 0))
        sock.listen(64)
        config = uvicorn.Config(
            app,
            http=limited_protocol(LIMITS),
            ws="none",
            lifespan="off",
            log_config=None,
            log_level=None,
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        server = _PageServer(config)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(server.serve, [sock])
            try:
                yield f"{LOOPBACK}:{sock.getsockname()[1]}"
            finally:
                server.should_exit = True
