"""Serving over stdio until the client closes stdin or a signal stops the server.

The SDK's `stdio_server` reads stdin in a worker thread, which no cancellation reaches: a server asked to stop
would wait for the client to close the pipe, and Python's exit would wait for that thread. Here stdin is read
only once the event loop reports it readable, so a stop interrupts the read at once; stdout stays the SDK's.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import anyio
from mcp.server import Server
from mcp.server.stdio import stdio_server

from managed_tools.server.app import InFlight
from managed_tools.server.stopping import Stopping

CHUNK = 65536
WIND_DOWN_SECONDS = 2.0


async def serve_stdio(server: Server[Any], calls: InFlight, stopping: Stopping) -> None:
    """Serve until stdin ends. A stop answers the calls in flight, then ends stdin as a client closing it would;
    if the connection does not wind down within a few seconds even so, it is cancelled."""
    with anyio.CancelScope() as serving, _claimed_stdin() as stdin:

        async def stop() -> None:
            await calls.end_all()
            stdin.end()
            await anyio.sleep(WIND_DOWN_SECONDS)
            serving.cancel()

        stopping.on_stop(stop)
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


@contextmanager
def _claimed_stdin() -> Iterator[StdinLines]:
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
            yield StdinLines(text, wire)
    finally:
        if restore:
            os.dup2(wire, 0)
        os.close(wire)


class StdinLines(anyio.AsyncFile[str]):
    """Lines of UTF-8 (bad bytes replaced, as the SDK reads them) from `fd`, each read waiting in the event loop.

    `text` is the same descriptor as a file, for the rest of AsyncFile's interface; only `readline` serves.
    """

    def __init__(self, text: IO[str], fd: int) -> None:
        super().__init__(text)
        self._fd = fd
        self._buffer = bytearray()
        self._searched = 0  # no newline before this offset of the buffer
        self._pollable = True
        self._ended = False
        self._reading = anyio.CancelScope()

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
            self._searched = len(self._buffer)
            chunk = await self._read()
            if not chunk:  # end of input: what is left, then ""
                end = len(self._buffer) - 1
                break
            self._buffer += chunk
        line = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        self._searched = 0
        return line.decode("utf-8", errors="replace")

    async def _read(self) -> bytes:
        if self._pollable:
            try:
                await anyio.wait_readable(self._fd)
            except PermissionError:  # a regular file or /dev/null, which epoll refuses; reading them never waits
                self._pollable = False
        return os.read(self._fd, CHUNK)
