"""Serving over stdio until the client closes stdin or a signal stops the server.

The SDK's `stdio_server` reads stdin in a worker thread, which no cancellation reaches: a server asked to stop
would wait for the client to close the pipe, and Python's exit would wait for that thread. Here stdin is read
only once the event loop reports it readable, so a stop interrupts the read at once; stdout stays the SDK's.
Every frame gets an answer: one the SDK could not read is answered here (server/stdio/frames.py) instead of being
dropped, as HTTP answers the same bytes with a 400.
"""

from __future__ import annotations

import contextvars
import fcntl
import os
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import IO, Any, Protocol, Self

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from managed_tools.server.config.rules import DEFAULT_MAX_REQUEST_BYTES
from managed_tools.server.mcp.app import InFlight
from managed_tools.server.runtime.stopping import Stopping
from managed_tools.server.stdio.frames import (
    answer_to_misread_notification,
    answer_to_oversized,
    answers_to_unreadable,
)

CHUNK = 65536
WIND_DOWN_SECONDS = 2.0
# When stdin ends (`echo '...' | managed-tools serve`), the requests read before it are answered first, for this
# long at most: a call waiting on a question its client can no longer answer must not hold the exit forever.
ANSWER_BEFORE_END_SECONDS = 10.0
CANCELLED = "notifications/cancelled"
# Of a line over the limit only this much is kept, to read its id from; the rest is dropped as it arrives.
OVERSIZED_PREFIX = 4096
# What the SDK's reader is handed for a line over the limit: one item (a parse failure), answered here.
_NOT_A_FRAME = "\n"
_BOM = "\ufeff"


async def serve_stdio(
    server: Server[Any], calls: InFlight, stopping: Stopping, max_line_bytes: int = DEFAULT_MAX_REQUEST_BYTES
) -> None:
    """Serve until stdin ends. A stop answers the calls in flight, then ends stdin as a client closing it would;
    if the connection does not wind down within a few seconds even so, it is cancelled. A line longer than
    `max_line_bytes` is never held: it is dropped as it arrives and answered with an error."""
    with anyio.CancelScope() as serving, _claimed_stdin(max_line_bytes) as stdin:

        async def stop() -> None:
            await calls.end_all()
            stdin.end()
            await anyio.sleep(WIND_DOWN_SECONDS)
            serving.cancel()

        stopping.on_stop(stop)
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            outbox = CountedAnswers(write_stream, stdin.unanswered)
            frames = AnsweredFrames(read_stream, outbox, stdin)
            await server.run(frames, outbox, server.create_initialization_options())


@contextmanager
def _claimed_stdin(max_line_bytes: int) -> Iterator[StdinLines]:
    """stdin's pipe on a private descriptor, and fd 0 on /dev/null while serving (as the SDK's own claim does):
    nothing else in the process, a user's tool module say, can take the protocol's bytes."""
    try:
        wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:  # started with stdin closed: a client that has already gone
        wire, restore = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), False
    else:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        restore = True
    try:
        with open(wire, encoding="utf-8", errors="replace", closefd=False) as text:
            yield StdinLines(text, wire, max_line_bytes)
    finally:
        if restore:
            os.dup2(wire, 0)
        os.close(wire)


class OversizedLine(str):
    """The opening of a line that was over the limit (the rest was dropped unread)."""


class StdinLines(anyio.AsyncFile[str]):
    """Lines of UTF-8 (bad bytes replaced, as the SDK reads them) from `fd`, each read waiting in the event loop.

    `text` is the same descriptor as a file, for the rest of AsyncFile's interface; only `readline` serves.
    A line is held only up to `max_line_bytes`: past that it is dropped up to its newline, chunk by chunk, so a
    client sending one endless line costs a bounded buffer, not its size in memory.
    """

    def __init__(self, text: IO[str], fd: int, max_line_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        super().__init__(text)
        self._fd = fd
        self._max = max_line_bytes
        self._buffer = bytearray()
        self._searched = 0  # no newline before this offset of the buffer
        self._pollable = True
        self._ended = False
        self._reading = anyio.CancelScope()
        # Lines handed to the SDK's reader whose message (or exception) the server has not received yet: the reader
        # turns each line into exactly one item, in order, so the oldest here is the next item's line.
        self.unmatched: deque[str] = deque()
        self.unanswered = Unanswered()

    @property
    def max_line_bytes(self) -> int:
        return self._max

    def end(self) -> None:
        """End of input from now on, whatever the client sends."""
        self._ended = True
        self._reading.cancel()

    async def readline(self) -> str:
        with anyio.CancelScope() as self._reading:
            if not self._ended:
                return await self._line()
        return ""

    async def _line(self) -> str:
        while (end := self._buffer.find(b"\n", self._searched)) < 0:
            if len(self._buffer) > self._max:
                return await self._drop_oversized()
            self._searched = len(self._buffer)
            chunk = await self._read()
            if not chunk:  # end of input: what is left, then ""
                end = len(self._buffer) - 1
                break
            self._buffer += chunk
        if end + 1 > self._max:
            return await self._drop_oversized()
        line = self._take(end + 1)
        if line.startswith(_BOM):  # some writers open each frame with a byte-order mark; it is not JSON
            line = line.removeprefix(_BOM)
        if line:
            self.unmatched.append(line)
        else:  # the end: the SDK would stop serving at once, dropping what is still being answered
            await self.unanswered.settled(ANSWER_BEFORE_END_SECONDS)
        return line

    def _take(self, size: int) -> str:
        line = bytes(self._buffer[:size]).decode("utf-8", errors="replace")
        del self._buffer[:size]
        self._searched = 0
        return line

    async def _drop_oversized(self) -> str:
        """Drop the line being read, up to and with its newline (or the end of input), keeping its opening."""
        opening = bytes(self._buffer[:OVERSIZED_PREFIX]).decode("utf-8", errors="replace").removeprefix(_BOM)
        while (end := self._buffer.find(b"\n")) < 0:
            self._buffer.clear()
            chunk = await self._read()
            if not chunk:
                break
            self._buffer += chunk
        del self._buffer[: end + 1 if end >= 0 else len(self._buffer)]
        self._searched = 0
        self.unmatched.append(OversizedLine(opening))
        return _NOT_A_FRAME

    async def _read(self) -> bytes:
        if self._pollable:
            try:
                await anyio.wait_readable(self._fd)
            except PermissionError:  # a regular file or /dev/null, which epoll refuses; reading them never waits
                self._pollable = False
        return os.read(self._fd, CHUNK)


class _Closable(Protocol):
    async def aclose(self) -> None: ...


class _Items(_Closable, Protocol):
    async def receive(self) -> SessionMessage | Exception: ...


class _Wrapping:
    """A stream over one of the SDK's: closing it, or leaving its block, closes the one it wraps."""

    def __init__(self, inner: _Closable) -> None:
        self._inner = inner

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _Outbox(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...


class AnsweredFrames(_Wrapping):
    """The SDK's stdio read stream, with each frame it could not read answered on the spot instead of passed on
    (the server would only log it) and each request it misread as a notification (an id of the wrong type)
    answered too."""

    def __init__(self, items: _Items, outbox: _Outbox, stdin: StdinLines) -> None:
        super().__init__(items)
        self._items = items
        self._outbox = outbox
        self._lines = stdin.unmatched
        self._unanswered = stdin.unanswered
        self._max_line_bytes = stdin.max_line_bytes

    @property
    def last_context(self) -> contextvars.Context | None:
        return getattr(self._items, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._items.receive()
            line = self._lines.popleft() if self._lines else ""
            if isinstance(line, OversizedLine):
                answers = [answer_to_oversized(line, self._max_line_bytes)]
            elif isinstance(item, Exception):
                answers = answers_to_unreadable(line, item)
            elif (answer := self._answer_for(item.message, line)) is not None:
                answers = [answer]
            else:
                return item
            for each in answers:
                await self._outbox.send(SessionMessage(each))

    def _answer_for(self, message: types.JSONRPCMessage, line: str) -> types.JSONRPCError | None:
        """Notes what is asked and what no longer needs an answer; an error for a request misread as a
        notification (None: the message goes on to the server)."""
        if isinstance(message, types.JSONRPCRequest):
            self._unanswered.asked(message.id)
        elif isinstance(message, types.JSONRPCNotification):
            if message.method == CANCELLED:  # a cancelled request gets no answer: nobody waits on it any more
                self._unanswered.answered((message.params or {}).get("requestId"))
            elif '"id"' in line:
                return answer_to_misread_notification(line)
        return None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class Unanswered:
    """The ids of the requests read and not answered yet."""

    def __init__(self) -> None:
        self._ids: set[types.RequestId] = set()
        self._none = anyio.Event()
        self._none.set()

    def asked(self, request_id: types.RequestId) -> None:
        if not self._ids:
            self._none = anyio.Event()
        self._ids.add(request_id)

    def answered(self, request_id: types.RequestId | None) -> None:
        self._ids.discard(request_id)
        if not self._ids:
            self._none.set()

    async def settled(self, within: float) -> None:
        with anyio.move_on_after(within):
            await self._none.wait()


class CountedAnswers(_Wrapping):
    """The SDK's stdio write stream, noting each request it answers (so the end of stdin can wait for them)."""

    def __init__(self, outbox: Any, unanswered: Unanswered) -> None:
        super().__init__(outbox)
        self._outbox = outbox
        self._unanswered = unanswered

    async def send(self, item: SessionMessage, /) -> None:
        await self._outbox.send(item)
        if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
            self._unanswered.answered(item.message.id)
