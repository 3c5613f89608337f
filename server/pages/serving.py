"""The page server: uvicorn on 127.0.0.1, a port the kernel picks, in the event loop of whatever transport the
MCP server speaks (stdio included). No access log, and uvicorn's log levels left alone: a request line or body
(which may hold a secret) is never logged.

Its port is bound and listening from start-up, so every page URL is valid from the moment it is given out; uvicorn
itself (with httptools and the connection limits) starts when the first page or the dashboard is opened, as most
servers never open one: ~8 ms of CPU and ~0.75 MB a start-up does not pay. A browser that connects in between
waits in the listen queue."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator

import anyio
import uvicorn
from starlette.types import ASGIApp

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.consent.board import Pages
from managed_tools.server.pages.site import PageSite

LOOPBACK = "127.0.0.1"
log = logging.getLogger("managed_tools.pages")


def pages_for(config: ServeConfig) -> Pages:
    return Pages(for_approvals=config.approvals == "page")


class _PageServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the MCP server's stop ends this one (server/runtime/stopping.py)
        yield


@contextlib.asynccontextmanager
async def serving_pages(pages: Pages) -> AsyncIterator[Pages]:
    """Serve `pages` for as long as the block runs; their URLs are valid from the moment it is entered."""
    pages.wanted = anyio.Event()
    async with serving_loopback(PageSite(pages), when=pages.wanted) as authority:
        pages.authority = authority
        log.info("approval and secret pages at %s (one-time links)", pages.origin)
        yield pages


@contextlib.asynccontextmanager
async def serving_loopback(app: ASGIApp, *, when: anyio.Event | None = None) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 at a port the kernel picks, for as long as the block runs; yields the authority
    ("127.0.0.1:PORT"), the only Host the app should answer. The port listens at once; with `when`, uvicorn
    answers from the moment that event is set."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        sock.bind((LOOPBACK, 0))
        sock.listen(64)
        server: list[_PageServer] = []  # once started
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_serve, app, sock, when, server)
            try:
                yield f"{LOOPBACK}:{sock.getsockname()[1]}"
            finally:
                if server:
                    server[0].should_exit = True
                else:  # never wanted: nothing runs but the wait
                    tasks.cancel_scope.cancel()


async def _serve(app: ASGIApp, sock: socket.socket, when: anyio.Event | None, started: list[_PageServer]) -> None:
    if when is not None:
        await when.wait()
    from managed_tools.server.http.limits import ConnectionLimits, limited_protocol  # imports httptools

    config = uvicorn.Config(
        app,
        http=limited_protocol(ConnectionLimits(header_timeout_seconds=10, body_timeout_seconds=10, max_connections=64)),
        ws="none",
        lifespan="off",
        log_config=None,
        log_level=None,
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    started.append(_PageServer(config))
    await started[0].serve([sock])
