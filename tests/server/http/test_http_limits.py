"""The HTTP protocol class every listener of ours uses (server/http/limits.py), on a real socket."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import anyio
import pytest
import uvicorn
from uvicorn.server import ServerState

from managed_tools.server.http.limits import ConnectionLimits, limited_protocol

pytestmark = pytest.mark.anyio
LIMITS = ConnectionLimits(header_timeout_seconds=5.0, body_timeout_seconds=5.0, max_connections=4)


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    raise AssertionError("no request is sent")


async def test_answers_are_sent_without_waiting_for_acknowledgements() -> None:
    """The regression: a listening socket made as server/http/transport.py `bind` makes it (proto 0) gives accepted
    sockets asyncio leaves Nagle's algorithm on for, so an answer's body waited behind its headers for the client's
    delayed acknowledgement: ~40 ms of every 2026-07-28 round trip."""
    accepted: list[Any] = []

    class Watched(limited_protocol(LIMITS)):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            accepted.append(transport.get_extra_info("socket"))

    config = uvicorn.Config(_app, http=Watched, log_config=None)
    config.load()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
        assert listening.proto == 0
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        server = await asyncio.get_running_loop().create_server(
            lambda: Watched(config, ServerState(), {}), sock=listening
        )
        async with server, await anyio.connect_tcp("127.0.0.1", listening.getsockname()[1]):
            with anyio.fail_after(5):
                while not accepted:  # noqa: ASYNC110 (the protocol is made in the server's callback)
                    await anyio.sleep(0.01)
            assert accepted[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_a_slow_answer_and_a_pipelined_request_are_not_cut_off_by_the_header_deadline() -> None:
    """The deadlines follow the parser's callbacks: while a request is being answered there is none, even when the
    client has already sent the next request (pipelined, read at once by httptools) and the answers take longer
    than the header deadline; the header deadline starts again only once the last answer is out."""
    limits = ConnectionLimits(header_timeout_seconds=0.3, body_timeout_seconds=0.3, max_connections=4)

    async def slow(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await anyio.sleep(0.5)
        body = scope["path"].encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    protocol = limited_protocol(limits)
    config = uvicorn.Config(slow, http=protocol, log_config=None)
    config.load()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        server = await asyncio.get_running_loop().create_server(
            lambda: protocol(config, ServerState(), {}), sock=listening
        )
        async with server, await anyio.connect_tcp("127.0.0.1", listening.getsockname()[1]) as stream:
            request = b"GET /%s HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
            await stream.send(request % b"first" + request % b"second")
            received = b""
            with anyio.fail_after(5):
                while received.count(b"HTTP/1.1 200 ") < 2 or not received.endswith(b"/second"):
                    received += await stream.receive()
            assert received.index(b"/first") < received.index(b"/second")
            with anyio.fail_after(2):  # then idle: the header deadline closes the connection without a 408
                with pytest.raises(anyio.EndOfStream):
                    await stream.receive()
