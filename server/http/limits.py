"""The HTTP/1.1 protocol every listener of ours gives uvicorn: its httptools parser, plus the connection limits
uvicorn does not have (request header and body deadlines, a bound on open connections) and TCP_NODELAY.

uvicorn arms no timer until a first response is complete (its keep-alive timeout), so a client that sends half a
request line, or headers a byte at a time, or a body slower than it announced, holds its connection for ever.
This subclass arms one deadline per request phase, counted from the start of the phase (not reset by each byte,
so trickling does not help): the headers must be complete within the header timeout of the connection opening (or
of the previous response ending), and the body within the body timeout of the headers. A missed deadline gets
`408` and the connection closes (a connection idle between requests just closes); the application, if it was
reading the body, sees a disconnect. A connection beyond `max_connections` gets `503` and is closed before
anything is read. A response sent before the request body has arrived (a refusal: 401, 413, 421...) ends the
connection: the rest of the body is never read.

The parser is httptools (llhttp, Node.js's parser, in C), not h11: h11's parsing and framing in Python took about
0.4-0.5 ms of server CPU per Streamable HTTP call (docs/decisions/http-httptools.md). The request's phase is
followed through the parser's callbacks.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any, Literal

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

Phase = Literal["headers", "body"]
# Where the request being read is: waiting for one, in its headers, in its body, or read whole (being answered).
Reading = Literal["idle", "headers", "body", "read"]
PHASE_OF: dict[Reading, Phase | None] = {"idle": "headers", "headers": "headers", "body": "body", "read": None}


def _response(status: str, message: str) -> bytes:
    body = message.encode()
    head = f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {len(body)}\r\n"
    return head.encode() + b"connection: close\r\n\r\n" + body


TIMED_OUT = _response("408 Request Timeout", "The request took too long to arrive.")
TOO_MANY = _response("503 Service Unavailable", "Too many open connections; try again later.")


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_seconds: float
    body_timeout_seconds: float
    max_connections: int


def limited_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """The protocol class to give uvicorn (`Config(http=...)`), bound to these limits."""

    class Limited(LimitedProtocol):
        LIMITS = limits

    return Limited


class LimitedProtocol(HttpToolsProtocol):
    LIMITS: ConnectionLimits

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(config, server_state, app_state, **kwargs)
        self._reading: Reading = "idle"
        self._phase: Phase | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._heard = False  # some of the current phase has arrived
        self._refused = False  # beyond the connection bound: never served
        self._finished = False  # answered before its body arrived: read no more

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.LIMITS.max_connections:
            self._refused = True
            self.transport = transport
            transport.write(TOO_MANY)
            transport.close()
            return
        super().connection_made(transport)
        _no_delay(transport)
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._arm(None)
        if not self._refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self._finished:
            return
        self._heard = True
        super().data_received(data)
        self._watch()

    # The parser's callbacks, run inside data_received: they only note where the request is.
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading = "headers"

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._reading = "body"

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading = "read"

    def on_response_complete(self) -> None:
        # A request read while this one was answered (pipelined) starts now, and the parser's note is its own.
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.is_closing() or pipelined:
            return
        if self._reading == "body":
            # Answered without the body: send end-of-stream after the response and ignore what still comes
            # (closing outright could reset the connection before the client has read the answer).
            self._finished = True
            self._arm(None)
            self._unset_keepalive_if_required()
            if self.transport.can_write_eof():
                self.transport.write_eof()
            else:
                self.transport.close()
            return
        if self._reading == "read":
            self._reading = "idle"
        self._watch()

    def _watch(self) -> None:
        """Arm the deadline of the phase the request is in (if it changed)."""
        self._arm(PHASE_OF[self._reading])

    def _arm(self, phase: Phase | None) -> None:
        if phase == self._phase:
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        self._heard = False
        if phase is not None:
            seconds = self.LIMITS.header_timeout_seconds if phase == "headers" else self.LIMITS.body_timeout_seconds
            self._deadline = self.loop.call_later(seconds, self._expired)

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        answered = False
        if self._phase == "body" and self.cycle is not None:
            answered = self.cycle.response_started
            self.cycle.disconnected = True  # the application's next receive() is a disconnect
            self.cycle.message_event.set()
        if not answered and (self._heard or self._phase == "body"):  # an idle connection just closes
            self.transport.write(TIMED_OUT)
        self.transport.close()


def _no_delay(transport: asyncio.Transport) -> None:
    """Send each write at once. asyncio turns Nagle's algorithm off only for sockets it created itself (it checks
    `proto == IPPROTO_TCP`, which a socket made with `socket.socket(AF_INET, SOCK_STREAM)` and passed to uvicorn
    does not have). With Nagle on, the body of an answer waits behind its headers until the client acknowledges
    them, and a client delays that acknowledgement by up to 40 ms: most of every 2026-07-28 round trip."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
