"""Attaching a connection to a durable session: open a wake on connect, close it on disconnect.

Handlers never hold an attachment of their own: the server's lifespan state is an `Attachments`, asked per
request. A duplex connection (stdio, in-memory, legacy SSE) is attached once for its whole life (`attached`);
Streamable HTTP resolves each request (server/http/sessions.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from mcp.server import ServerRequestContext

from managed_tools.stores import events, sessions, setups, wake_requests
from managed_tools.stores.errors import DatabaseUnwritableError
from managed_tools.stores.sessions import LOCAL_OWNER
from managed_tools.tools.environment.setup import live_setup
from managed_tools.tools.framework.context import telemetry
from managed_tools.tools.framework.context.context import Attachment, Runtime

log = logging.getLogger("managed_tools.attach")
_OPENED: dict[str, int] = {}  # each open wake's start, for its trace span (tools/framework/context/telemetry.py)


async def attach(runtime: Runtime, session_id: str | None, transport: str, *, owner: str = LOCAL_OWNER) -> Attachment:
    """Resume `session_id` (of this agent and `owner`) or start a new session of theirs, record the setup, and open
    a wake on it."""
    agent = runtime.environment.agent_id
    await anyio.to_thread.run_sync(runtime.skills.reload)  # the skills this wake starts with, watched or not
    setup, form = live_setup(runtime)
    async with runtime.db.write() as tx:
        if session_id is None:
            record = await sessions.create_session(tx, agent, owner=owner)
        else:
            record = await sessions.get_agent_session(tx, session_id, agent, owner=owner)
        # The contract this wake runs under, kept once per distinct setup (agent_describe_setup reads it back).
        await setups.record_setup(tx, agent, setup.fingerprint, form)
        wake = await sessions.open_wake(tx, record.id, transport=transport, setup_fingerprint=setup.fingerprint)
        await events.append_event(
            tx,
            record.id,
            wake.id,
            "span.started",
            {"spanId": wake.id, "spanKind": "wake", "transport": transport, "pid": wake.pid},
            summary=f"Connected over {transport}",
        )
        for offered in await wake_requests.offer_due(tx, record.id, wake.id):
            # A wake that fell due with no model provider to run it: this connection's client is the one woken.
            await events.append_event(
                tx,
                record.id,
                wake.id,
                "wake.offered",
                {"wakeRequestId": offered.id, "reason": offered.reason, "dueAt": offered.due_at},
                summary=f"Scheduled wake due: {offered.reason}",
            )
    _OPENED[wake.id] = time.time_ns()
    return Attachment(session_id=record.id, wake_id=wake.id, transport=transport, owner=owner)


async def detach(runtime: Runtime, attachment: Attachment) -> None:
    """Close the wake. A database still locked by another process only costs the wake its end time."""
    opened = _OPENED.pop(attachment.wake_id, None)
    if opened is not None:
        telemetry.wake(attachment.session_id, attachment.transport, opened)
    with anyio.CancelScope(shield=True):
        try:
            await _close(runtime, attachment)
        except DatabaseUnwritableError as exc:
            log.warning("wake %s left open at disconnect: %s", attachment.wake_id, exc)


async def _close(runtime: Runtime, attachment: Attachment) -> None:
    async with runtime.db.write() as tx:
        await sessions.close_wake(tx, attachment.wake_id)
        await events.append_event(
            tx,
            attachment.session_id,
            attachment.wake_id,
            "span.completed",
            {"spanId": attachment.wake_id, "spanKind": "wake", "result": "success"},
            summary="Disconnected",
        )


class Attachments(Protocol):
    """Which durable session and wake a request works in."""

    async def resolve(self, ctx: ServerRequestContext[Any]) -> Attachment: ...


@dataclass(frozen=True)
class Attached:
    """A connection attached once for its whole life: every request on it works in the same wake."""

    attachment: Attachment

    async def resolve(self, ctx: ServerRequestContext[Any]) -> Attachment:
        return self.attachment


@asynccontextmanager
async def attached(runtime: Runtime, session_id: str | None, transport: str) -> AsyncIterator[Attached]:
    """Attach for the duration of the block (one connection), then close the wake."""
    attachment = await attach(runtime, session_id, transport)
    try:
        yield Attached(attachment)
    finally:
        await detach(runtime, attachment)
