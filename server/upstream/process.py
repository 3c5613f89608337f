"""A stdio upstream: spawned through sandbox/spawn.py in a Landlock domain of its own, spoken to over its pipes.

The SDK's stdio client spawns with its own call, which cannot pass the ruleset descriptor our launcher needs, so
the process is ours and the transport is a small one over its pipes (newline-delimited JSON-RPC, as the SDK's).
It runs in its own process group: stopping it kills the group, whatever it started.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from managed_tools.sandbox.spawn import Child, Domain, spawn
from managed_tools.server.upstream.log_repeats import limited
from managed_tools.tools.framework.wire.redaction import scrub

log = limited("managed_tools.upstream")
CHUNK = 1 << 16
MAX_MESSAGE_BYTES = 16 << 20  # one JSON-RPC line; a server that sends more is stopped
STDERR_LINES = 20  # kept to say why an upstream stopped
STOP_GRACE_SECONDS = 0.5  # after its stdin closes, then again after SIGTERM (MCP's shutdown order)


def base_env(home: Path) -> dict[str, str]:
    """What every upstream starts from: its own HOME and TMPDIR, a locale; none of our variables (its PATH and
    caches are the confinement's: `Confinement.upstream_env`)."""
    return {
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }


class UpstreamProcess:
    """One running upstream process: its pipes as MCP streams, its stderr tail, and how to stop it."""

    def __init__(self, name: str, child: Child, secrets: set[str]) -> None:
        self.name = name
        self.child = child
        self.process = child.process
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.exited = anyio.Event()
        self._secrets = secrets

    @asynccontextmanager
    async def streams(self) -> AsyncIterator[TransportStreams]:
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._read, read_writer)
            tasks.start_soon(self._write, write_reader)
            tasks.start_soon(self._read_stderr)
            try:
                yield read_stream, write_stream
            finally:
                tasks.cancel_scope.cancel()
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()

    async def _read(self, sink: anyio.abc.ObjectSendStream[SessionMessage | Exception]) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        buffer = b""
        async with sink:
            try:
                while chunk := await stdout.read(CHUNK):
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    if len(buffer) > MAX_MESSAGE_BYTES:
                        log.warning("upstream %s sent a message over %d bytes; stopping it", self.name, len(buffer))
                        break
                    for line in lines:
                        if line.strip() and (message := _message(self.name, line)) is not None:
                            await sink.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
                pass
            finally:
                self.exited.set()

    async def _write(self, source: anyio.abc.ObjectReceiveStream[SessionMessage]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        with contextlib.suppress(anyio.ClosedResourceError, ConnectionError, OSError):
            async with source:
                async for message in source:
                    stdin.write(message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
                    await stdin.drain()
        self.exited.set()  # its stdin is gone: the session must not wait on it

    async def _read_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        with contextlib.suppress(ValueError, ConnectionError):  # ValueError: a line over the reader's limit
            while line := await stderr.readline():
                text = scrub(line.decode("utf-8", "replace").rstrip(), self._secrets)
                self.stderr.append(text[:500])
                log.debug("upstream %s: %s", self.name, text)

    async def stop(self) -> None:
        """Close its stdin, then SIGTERM, then SIGKILL its whole process group (what it started goes with it)."""
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with anyio.move_on_after(STOP_GRACE_SECONDS):
                await self.process.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signum)
        with anyio.move_on_after(STOP_GRACE_SECONDS):
            await self.process.wait()
        if self.process.returncode is not None:
            self.child.end()  # what it started goes with it


def _message(name: str, line: bytes) -> SessionMessage | None:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError:
        log.warning("upstream %s wrote a line that is not JSON-RPC; ignored", name)
        return None


@asynccontextmanager
async def started(
    name: str,
    argv: list[str],
    *,
    domain: Domain | None,
    env: dict[str, str],
    cwd: Path,
    secrets: set[str],
) -> AsyncIterator[UpstreamProcess]:
    """The upstream process, stopped (its group killed) on the way out, however that comes."""
    child = await spawn(
        argv,
        domain=domain,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        new_session=True,
    )
    upstream = UpstreamProcess(name, child, secrets)
    try:
        yield upstream
    finally:
        with anyio.CancelScope(shield=True):
            await upstream.stop()
