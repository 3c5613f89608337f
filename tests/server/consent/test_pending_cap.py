"""Requests waiting for a person are capped per session and per principal (issue 39 F15: 10,000 were accepted for
one principal), through real in-process clients in both eras, on both engines, with callers racing past the cap
from one server and from two servers on one state; another principal is never blocked."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, error_text
from mcp import Client
from pydantic import ValidationError

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.config.user_config import UserConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import approvals, sessions
from managed_tools.stores.approvals import PendingCaps
from managed_tools.stores.errors import PendingCapError
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

ALICE = "oauth:https://issuer.example|alice"


@pytest.fixture
def config(workspace: Path, database_option: str | None) -> ServeConfig:
    built = ServeConfig.build(
        workspace=workspace, data_dir=None, tool_modules=("support.probe_tools",), database=database_option
    )
    return built.model_copy(update={"pending_approvals": PendingCaps(per_session=3, per_principal=5)})


@asynccontextmanager
async def client_for(rt: Runtime, mode: str = "auto") -> AsyncIterator[Client]:
    """A client that cannot answer a question: each call that asks leaves a request for `managed-tools approve`."""
    async with Client(build_server(rt, transport="memory"), mode=mode) as client:
        yield client


async def call(client: Client, label: str) -> types.CallToolResult:
    return await client.call_tool("probe_danger", {"label": label})


def kind(result: types.CallToolResult) -> str:
    assert result.is_error
    error: dict[str, str] = (result.meta or {})["managed-tools/error"]
    return error["kind"]


async def waiting(rt: Runtime, owner: str | None = None) -> int:
    async with rt.db.read() as tx:
        sql = "SELECT COUNT(*) FROM approvals a JOIN sessions s ON s.id = a.session_id WHERE a.status = 'pending'"
        if owner is None:
            return int(await tx.scalar(sql))
        return int(await tx.scalar(sql + " AND s.owner = ?", (owner,)))


async def session_of(client: Client) -> str:
    snapshot = await client.call_tool("session_get_snapshot", {})
    session_id: str = json.loads(snapshot.content[0].text)["sessionId"]  # type: ignore[union-attr]
    return session_id


@pytest.mark.parametrize("mode", ERAS)
async def test_a_session_at_its_cap_is_told_how_to_clear_and_asks_again_once_answered(
    config: ServeConfig, mode: str
) -> None:
    async with open_runtime(config) as rt, client_for(rt, mode) as client:
        asked = [await call(client, label) for label in ("a", "b", "c")]
        refused = await call(client, "d")
        again = await call(client, "a")  # the same call finds its own request: nothing new is asked
        ids = [(r.meta or {})["managed-tools/requiresAction"]["requestId"] for r in asked]
        async with rt.db.write() as tx:
            await approvals.decide(tx, ids[0], approved=False, by="test")
        after_deny = await call(client, "d")
        session_id = await session_of(client)
        async with rt.db.write() as tx:
            await approvals.interrupt(tx, session_id, by="test")
        after_interrupt = [await call(client, label) for label in ("e", "f", "g")]
    assert [kind(r) for r in asked] == ["permission"] * 3
    assert kind(refused) == "quota_exceeded"
    text = error_text(refused)
    assert "This session has 3 permission requests waiting for a person" in text
    assert "pendingApprovals.perSession: 3" in text and "probe_danger was not asked about and did not run" in text
    for how in ("managed-tools pending", "managed-tools deny ID", "managed-tools interrupt --session ID"):
        assert how in text
    assert kind(again) == "permission" and ids[0] in error_text(again)
    assert kind(after_deny) == "permission"
    assert [kind(r) for r in after_interrupt] == ["permission"] * 3


async def test_a_principal_at_its_cap_never_blocks_another(config: ServeConfig) -> None:
    """Five across the local principal's sessions (three in one, two in another), then refused in a third; Alice,
    another principal, still gets her own five, and is then refused by her own count alone."""
    async with open_runtime(config) as rt, AsyncExitStack() as stack:
        one, two, three = [await stack.enter_async_context(client_for(rt)) for _ in range(3)]
        for client, labels in ((one, "abc"), (two, "de")):
            assert [kind(await call(client, label)) for label in labels] == ["permission"] * len(labels)
        refused = await call(three, "f")
        async with rt.db.write() as tx:
            alices = [await sessions.create_session(tx, rt.environment.agent_id, owner=ALICE) for _ in range(2)]
        for n in range(5):
            async with rt.db.write() as tx:
                await _ask(tx, alices[n % 2].id, f"alice-{n}", rt.pending_caps)
        with pytest.raises(PendingCapError, match="Your sessions have 5 permission requests"):
            async with rt.db.write() as tx:
                await _ask(tx, alices[1].id, "alice-5", rt.pending_caps)
        local, alice = await waiting(rt, sessions.LOCAL_OWNER), await waiting(rt, ALICE)
    assert kind(refused) == "quota_exceeded"
    assert "Your sessions have 5 permission requests" in error_text(refused)
    assert "pendingApprovals.perPrincipal: 5" in error_text(refused)
    assert (local, alice) == (5, 5)


async def test_callers_racing_past_the_cap_never_overshoot_it(config: ServeConfig) -> None:
    """Twelve clients at once, each its own session, each asking twice: exactly the principal's cap is made."""
    async with open_runtime(config) as rt, AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(client_for(rt)) for _ in range(12)]
        results: list[types.CallToolResult] = []

        async def ask_twice(client: Client, n: int) -> None:
            for label in (f"{n}-x", f"{n}-y"):
                results.append(await call(client, label))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for n, client in enumerate(clients):
                    tg.start_soon(ask_twice, client, n)
        raced = await waiting(rt)
    kinds = sorted(kind(r) for r in results)
    assert raced == 5 and kinds == ["permission"] * 5 + ["quota_exceeded"] * 19


async def test_two_servers_racing_in_one_session_hold_the_session_cap(config: ServeConfig) -> None:
    """Two runtimes on one state (two processes' worth of connections), twenty writers at once into one session:
    the count and the insert are one write transaction, so exactly the cap is made."""
    async with open_runtime(config) as first, open_runtime(config) as second:
        async with first.db.write() as tx:
            session = await sessions.create_session(tx, first.environment.agent_id)
        made: list[bool] = []

        async def race(rt: Runtime, n: int) -> None:
            try:
                async with rt.db.write() as tx:
                    await _ask(tx, session.id, f"raced-{n}", rt.pending_caps)
                made.append(True)
            except PendingCapError:
                made.append(False)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for n in range(20):
                    tg.start_soon(race, (first, second)[n % 2], n)
        count = await waiting(second)
    assert (count, made.count(True), made.count(False)) == (3, 3, 17)


def test_the_caps_are_configured_in_config_json() -> None:
    assert UserConfig().pending_approvals == PendingCaps(per_session=20, per_principal=100)
    chosen = UserConfig.model_validate({"pendingApprovals": {"perSession": 5, "perPrincipal": 50}})
    assert chosen.pending_approvals == PendingCaps(per_session=5, per_principal=50)
    for bad in ({"perSession": 0}, {"perPrincipal": -1}, {"perSesion": 5}):
        with pytest.raises(ValidationError):
            UserConfig.model_validate({"pendingApprovals": bad})


async def _ask(tx: Any, session_id: str, label: str, caps: PendingCaps) -> None:
    await approvals.create(
        tx,
        session_id=session_id,
        wake_id=None,
        kind="tool_confirmation",
        tool_name="probe_danger",
        arguments={"label": label},
        args_digest=label,
        channel="out_of_band",
        caps=caps,
    )
