"""A session's check (its agent and owner) is read from the store once per session, and only a committed one
counts (tools/framework/context/scope.py `scoped_session_id`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from conftest import Connect, data

from managed_tools.server.connection.ports import NoConsent
from managed_tools.stores import sessions
from managed_tools.stores.db import Tx
from managed_tools.stores.errors import AccessDeniedError
from managed_tools.tools.framework.context.context import Attachment, Ports, Runtime, ToolContext
from managed_tools.tools.framework.context.ports import Quiet
from managed_tools.tools.framework.context.scope import scoped_session_id

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


class NoSampler:
    async def sample(self, prompt: str, *, max_tokens: int) -> str:
        raise AssertionError("nothing samples here")


PORTS = Ports(consent=NoConsent(), progress=Quiet(), sampler=NoSampler(), client_log=Quiet())


def context(runtime: Runtime, tx: Tx, session_id: str, owner: str = "") -> ToolContext:
    attachment = Attachment(session_id=session_id, wake_id="w", transport="memory", owner=owner)
    return ToolContext(runtime, attachment, PORTS, tx, anyio.current_time() + 30, logging.getLogger("test"))


@asynccontextmanager
async def reading(runtime: Runtime, session_id: str, owner: str = "") -> AsyncIterator[ToolContext]:
    async with runtime.db.read() as tx:
        yield context(runtime, tx, session_id, owner)


class RolledBack(Exception):
    pass


async def test_a_session_checked_in_a_transaction_that_rolled_back_is_checked_again(runtime: Runtime) -> None:
    with pytest.raises(RolledBack):
        async with runtime.db.write() as tx:
            made = await sessions.create_session(tx, "default")
            assert await scoped_session_id(context(runtime, tx, made.id), None) == made.id
            raise RolledBack
    async with reading(runtime, made.id) as ctx:
        with pytest.raises(AccessDeniedError):
            await scoped_session_id(ctx, None)  # the session is gone with the rollback: not taken as checked


async def test_a_checked_session_is_still_refused_to_another_owner_or_agent(runtime: Runtime) -> None:
    async with runtime.db.write() as tx:
        alices = await sessions.create_session(tx, "default", owner="alice")
        betas = await sessions.create_session(tx, "beta")
    for _ in range(2):  # the second time from what the first remembered
        async with reading(runtime, alices.id, owner="alice") as ctx:
            assert await scoped_session_id(ctx, None) == alices.id
        async with reading(runtime, "any", owner="bob") as ctx:
            with pytest.raises(AccessDeniedError):
                await scoped_session_id(ctx, alices.id)
        async with reading(runtime, "any") as ctx:
            with pytest.raises(AccessDeniedError):
                await scoped_session_id(ctx, betas.id)


async def test_reading_tools_answer_alike_once_the_session_is_remembered(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        first = [data(await client.call_tool("memory_read", {"target": "session_state"})) for _ in range(2)]
        events = [data(await client.call_tool("session_get_events", {"limit": 1})) for _ in range(2)]
    assert first[0] == first[1] and first[0]["sessionId"] == events[0]["sessionId"] == events[1]["sessionId"]
    async with runtime.db.write() as tx:
        foreign = await sessions.create_session(tx, "beta")
    async with connect(runtime) as client:
        for _ in range(2):
            refused = await client.call_tool("memory_read", {"target": "session_state", "sessionId": foreign.id})
            assert refused.is_error
