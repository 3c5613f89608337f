"""Attaching a connection to a durable session: open a wake on connect, close it on disconnect."""

from __future__ import annotations

import logging

import anyio

from stores import events, sessions
from stores.errors import DatabaseBusyError
from tools.context import Attachment, Runtime
from tools.environment import setup_fingerprint

log = logging.getLogger("managed_tools.attach")


async def attach(runtime: Runtime, session_id: str | None, transport: str) -> Attachment:
    """Resume `session_id` (of this agent) or start a new session, and open a wake on it."""
    agent = runtime.environment.agent_id
    async with runtime.db.write() as tx:
        if session_id is None:
            record = await sessions.create_session(tx, agent)
        else:
            record = await sessions.get_agent_session(tx, session_id, agent)
        wake = await sessions.open_wake(
            tx, record.id, transport=transport, setup_fingerprint=setup_fingerprint(runtime)
        )
        await events.append_event(
            tx,
            record.id,
            wake.id,
            "span.started",
            {"spanId": wake.id, "spanKind": "wake", "transport": transport, "pid": wake.pid},
            summary=f"Connected over {transport}",
        )
    return Attachment(session_id=record.id, wake_id=wake.id, transport=transport)


async def detach(runtime: Runtime, attachment: Attachment) -> None:
    """Close the wake. A database still locked by another process only costs the wake its end time."""
    with anyio.CancelScope(shield=True):
        try:
            await _close(runtime, attachment)
        except DatabaseBusyError:
            log.warning("wake %s left open: the state database stayed locked at disconnect", attachment.wake_id)


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
