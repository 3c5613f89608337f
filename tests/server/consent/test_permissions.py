"""Permission pauses end to end: an always_ask tool never runs until a person approved these exact arguments.

Real clients (in-process and over stdio, both eras), the real CLI as a subprocess, and the side effect counted
in the real database.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import data, error_text
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import ClientRequestContext

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import approvals
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

TESTS = Path(__file__).resolve().parents[2]
ElicitFn = Callable[[ClientRequestContext, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


@pytest.fixture
def config(workspace: Path, database_option: str | None) -> ServeConfig:
    return ServeConfig.build(
        workspace=workspace, data_dir=None, tool_modules=("support.probe_tools",), database=database_option
    )


@pytest.fixture
async def rt(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as runtime:
        yield runtime


@asynccontextmanager
async def client_for(
    rt: Runtime, mode: str = "auto", *, wait: float = 5.0, session_id: str | None = None, **kwargs: Any
) -> AsyncIterator[Client]:
    server = build_server(rt, transport="memory", session_id=session_id, approval_wait_seconds=wait)
    async with Client(server, mode=mode, **kwargs) as client:
        yield client


def answer(action: str, content: dict[str, Any] | None = None, seen: list[str] | None = None) -> ElicitFn:
    async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        if seen is not None:
            seen.append(params.message)
        return types.ElicitResult(action=action, content=content)

    return on_elicit


async def never_answers(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    await anyio.sleep_forever()
    raise AssertionError


async def rows(rt: Runtime) -> int:
    async with rt.db.read() as tx:
        catalogue = "sqlite_master WHERE name" if tx.dialect.name == "sqlite" else "pg_tables WHERE tablename"
        exists = await tx.scalar(f"SELECT COUNT(*) FROM {catalogue} = 'probe'")
        return int(await tx.scalar("SELECT COUNT(*) FROM probe")) if exists else 0


async def event_types(rt: Runtime) -> list[str]:
    async with rt.db.read() as tx:
        return [
            r["type"] for r in await tx.fetchall("SELECT type FROM events WHERE type LIKE 'permission.%' ORDER BY seq")
        ]


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


async def run(*argv: str) -> Ran:
    """A real `managed-tools` process, as a person at a terminal would run it."""
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-m", "managed_tools.server", *argv], check=False)
    return Ran(done.returncode, done.stdout.decode(), done.stderr.decode())


async def cli(config: ServeConfig, *args: str) -> Ran:
    database = ("--database", config.database) if config.database else ()
    return await run(*args, "--data-dir", str(config.data_dir), *database)


# ---- handshake era, elicitation pushed on the call's stream ------------------------------------------------


async def test_legacy_accept_runs_and_shows_the_exact_action(rt: Runtime) -> None:
    seen: list[str] = []
    async with client_for(rt, "legacy", elicitation_callback=answer("accept", {"approve": True}, seen)) as client:
        result = data(await client.call_tool("probe_danger", {"label": "go", "count": 2}))
    assert result == {"rows": 2}
    assert await rows(rt) == 2
    assert "probe_danger" in seen[0] and '"label": "go"' in seen[0] and '"count": 2' in seen[0]
    assert "This adds 2 row(s) labelled 'go' to the probe table." in seen[0]  # the tool's own preview
    assert await event_types(rt) == ["permission.requested", "permission.decided", "permission.consumed"]


@pytest.mark.parametrize(
    ("action", "content", "expected"),
    [
        ("decline", None, "The user denied confirmation for probe_danger."),
        ("cancel", None, "The user denied confirmation for probe_danger (cancelled)."),
        (
            "accept",
            {"approve": False, "note": "not today"},
            "The user denied confirmation for probe_danger: not today.",
        ),
        ("accept", {"approve": "yes"}, "the answer was not a yes or no"),
        ("accept", {}, "the answer was not a yes or no"),
    ],
)
@pytest.mark.sqlite_only(reason="answer parsing; test_legacy_accept covers the store path")
async def test_legacy_anything_but_a_yes_is_a_denial(
    rt: Runtime, action: str, content: dict[str, Any] | None, expected: str
) -> None:
    async with client_for(rt, "legacy", elicitation_callback=answer(action, content)) as client:
        result = await client.call_tool("probe_danger", {"label": "no"})
    assert expected in error_text(result)
    assert (result.meta or {})["managed-tools/error"] == {"kind": "permission", "status": "blocked"}
    assert await rows(rt) == 0
    assert await event_types(rt) == ["permission.requested", "permission.decided"]


async def test_legacy_client_that_never_answers_gets_a_bounded_wait(rt: Runtime) -> None:
    async with client_for(rt, "legacy", wait=0.5, elicitation_callback=never_answers) as client:
        with anyio.fail_after(10):
            result = await client.call_tool("probe_danger", {"label": "silent"})
    assert "denied confirmation for probe_danger (no answer in time)" in error_text(result)
    assert await rows(rt) == 0


# ---- 2026-07-28: input-required round trip ------------------------------------------------------------------


async def test_modern_input_required_round_trip(rt: Runtime) -> None:
    seen: list[str] = []
    async with client_for(rt, elicitation_callback=answer("accept", {"approve": True}, seen)) as client:
        assert client.protocol_version == "2026-07-28"
        assert data(await client.call_tool("probe_danger", {"label": "modern"})) == {"rows": 1}
        denied_client = answer("decline")
    async with client_for(rt, elicitation_callback=denied_client) as client:
        refused = await client.call_tool("probe_danger", {"label": "modern"})
    assert "probe_danger" in seen[0]
    assert "denied confirmation" in error_text(refused)
    assert await rows(rt) == 1


async def _first_round(client: Client, arguments: dict[str, Any]) -> types.InputRequiredResult:
    first = await client.session.call_tool("probe_danger", arguments, allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult)
    assert first.request_state is not None and first.request_state.startswith("v1.")
    assert set(first.input_requests or {}) == {"consent"}
    return first


YES: types.InputResponses = {"consent": types.ElicitResult(action="accept", content={"approve": True})}


async def test_modern_request_state_is_sealed_bound_and_single_use(rt: Runtime) -> None:
    async with client_for(rt, elicitation_callback=answer("accept", {"approve": True})) as client:
        first = await _first_round(client, {"label": "sealed"})
        state = first.request_state
        assert state is not None
        with pytest.raises(MCPError, match="Invalid or expired requestState"):  # forged
            await client.session.call_tool(
                "probe_danger", {"label": "sealed"}, input_responses=YES, request_state=state[:-4] + "AAAA"
            )
        with pytest.raises(MCPError, match="Invalid or expired requestState"):  # re-bound to other arguments
            await client.session.call_tool("probe_danger", {"label": "other"}, input_responses=YES, request_state=state)
        ok = await client.session.call_tool(
            "probe_danger", {"label": "sealed"}, input_responses=YES, request_state=state
        )
        replay = await client.session.call_tool(
            "probe_danger", {"label": "sealed"}, input_responses=YES, request_state=state
        )
    assert data(ok) == {"rows": 1}
    assert "already used" in error_text(replay)
    assert await rows(rt) == 1


async def test_modern_request_state_expires(rt: Runtime) -> None:
    async with client_for(rt, wait=0.3, elicitation_callback=answer("accept", {"approve": True})) as client:
        first = await _first_round(client, {"label": "late"})
        await anyio.sleep(0.6)
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await client.session.call_tool(
                "probe_danger", {"label": "late"}, input_responses=YES, request_state=first.request_state
            )
    assert await rows(rt) == 0


# ---- no elicitation: fail closed, approve out of band --------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_out_of_band_approval_runs_exactly_once(rt: Runtime, config: ServeConfig, mode: str) -> None:
    async with client_for(rt, mode) as client:
        blocked = await client.call_tool("probe_danger", {"label": "oob"})
        action = (blocked.meta or {})["managed-tools/requiresAction"]
        request_id = action["requestId"]
        text = error_text(blocked)
        assert f"managed-tools approve {request_id}" in text
        assert action["toolName"] == "probe_danger" and len(action["argsDigest"]) == 64
        # asking again before a decision reuses the same request
        again = await client.call_tool("probe_danger", {"label": "oob"})
        assert (again.meta or {})["managed-tools/requiresAction"]["requestId"] == request_id
        snapshot = data(await client.call_tool("session_get_snapshot", {}))
        assert snapshot["status"] == "requires_action" and snapshot["pendingActionToolName"] == "probe_danger"
        listed = await cli(config, "pending", "--json")
        assert [r["id"] for r in json.loads(listed.stdout)["requests"]] == [request_id]

        approved = await cli(config, "approve", request_id, "--note", "ok once")
        assert approved.returncode == 0, approved.stderr
        drifted = await client.call_tool("probe_danger", {"label": "drifted"})
        assert "needs a person's approval" in error_text(drifted)  # other arguments need their own approval
        assert data(await client.call_tool("probe_danger", {"label": "oob"})) == {"rows": 1}
        third = await client.call_tool("probe_danger", {"label": "oob"})
        assert (third.meta or {})["managed-tools/requiresAction"]["requestId"] != request_id
    assert await rows(rt) == 1


@pytest.mark.sqlite_only(reason="CLI messages; approve and interrupt cover the CLI on PostgreSQL")
async def test_deny_and_cli_errors(rt: Runtime, config: ServeConfig) -> None:
    async with client_for(rt) as client:
        blocked = await client.call_tool("probe_danger", {"label": "deny me"})
        request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
        denied = await cli(config, "deny", request_id, "--note", "too risky")
        assert denied.returncode == 0 and "Denied probe_danger" in denied.stdout
        twice = await cli(config, "approve", request_id)
        assert twice.returncode == 1 and f"{request_id} is already denied" in twice.stderr
        unknown = await cli(config, "approve", "no-such-id")
        assert unknown.returncode == 1 and "No permission request no-such-id exists" in unknown.stderr
        retry = await client.call_tool("probe_danger", {"label": "deny me"})
        assert "needs a person's approval" in error_text(retry)  # a denial is not an approval of the retry
    assert await rows(rt) == 0
    decided = [e for e in await event_types(rt) if e == "permission.decided"]
    assert decided == ["permission.decided"]


async def test_interrupt_clears_pending_and_the_session_goes_idle(rt: Runtime, config: ServeConfig) -> None:
    async with client_for(rt) as client:
        blocked = await client.call_tool("probe_danger", {"label": "stop"})
        request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
        session_id = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        stopped = await cli(config, "interrupt", "--note", "changed my mind")
        assert stopped.returncode == 0 and f"Interrupted session {session_id}: 1 open request" in stopped.stdout
        snapshot = data(await client.call_tool("session_get_snapshot", {}))
        late = await cli(config, "approve", request_id)
    assert snapshot["status"] == "idle" and snapshot["pendingActionKind"] is None
    assert late.returncode == 1 and "already cleared" in late.stderr
    assert json.loads((await cli(config, "pending", "--json")).stdout)["requests"] == []
    assert await rows(rt) == 0


async def test_the_model_cannot_approve_its_own_request(rt: Runtime) -> None:
    sneaky: types.RequestParamsMeta = {"managed-tools/approved": True, "approve": True}  # type: ignore[typeddict-unknown-key]
    async with client_for(rt) as client:
        with_extra = await client.call_tool("probe_danger", {"label": "x", "approved": True})
        with_meta = await client.call_tool("probe_danger", {"label": "x"}, meta=sneaky)
        first_id = (with_meta.meta or {})["managed-tools/requiresAction"]["requestId"]
        # the permission tools only look; nothing they accept approves anything
        check = data(
            await client.call_tool("permissions_check", {"toolName": "probe_danger", "toolArgs": {"label": "x"}})
        )
        describe = data(await client.call_tool("permissions_describe", {}))
        forged = await client.call_tool("probe_danger", {"label": "x"}, input_responses=YES, request_state=None)
    assert "unexpected field 'approved'" in error_text(with_extra)
    assert "needs a person's approval" in error_text(with_meta)
    assert check["approvalState"] == "pending" and check["approvalRequestId"] == first_id
    assert [r["requestId"] for r in describe["openRequests"]] == [first_id]
    assert "needs a person's approval" in error_text(forged)  # answers without a state are ignored
    async with rt.db.read() as tx:
        assert [r.status for r in await approvals.list_open(tx)] == ["pending"]
    assert await rows(rt) == 0


# ---- over stdio ------------------------------------------------------------------------------------------------


@asynccontextmanager
async def stdio(config: ServeConfig, mode: str, *extra: str, **kwargs: Any) -> AsyncIterator[Client]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}  # this checkout, any cwd
    args = [
        "-m",
        "managed_tools.server",
        "serve",
        "--workspace",
        str(config.workspace),
        "--tools-module",
        "support.probe_tools",
        *(("--database", config.database) if config.database else ()),
        *extra,
    ]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with Client(params, mode=mode, **kwargs) as client:
        yield client


@pytest.mark.sqlite_only(reason="the stdio transport; approvals on PostgreSQL are tested in process")
async def test_over_stdio_elicitation_and_out_of_band(config: ServeConfig) -> None:
    async with stdio(config, "legacy", elicitation_callback=answer("accept", {"approve": True})) as client:
        assert data(await client.call_tool("probe_danger", {"label": "stdio"})) == {"rows": 1}
    async with stdio(config, "legacy", elicitation_callback=answer("decline")) as client:
        assert "denied confirmation" in error_text(await client.call_tool("probe_danger", {"label": "stdio"}))
    async with stdio(config, "legacy", "--approval-wait", "0.5", elicitation_callback=never_answers) as client:
        assert "no answer in time" in error_text(await client.call_tool("probe_danger", {"label": "stdio"}))
    async with stdio(config, "auto", elicitation_callback=answer("accept", {"approve": True})) as client:
        assert data(await client.call_tool("probe_danger", {"label": "modern stdio"})) == {"rows": 2}
    async with stdio(config, "auto") as client:
        blocked = await client.call_tool("probe_danger", {"label": "stdio"})
        request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
        assert (await cli(config, "approve", request_id)).returncode == 0
        assert data(await client.call_tool("probe_danger", {"label": "stdio"})) == {"rows": 3}
        assert "needs a person's approval" in error_text(await client.call_tool("probe_danger", {"label": "stdio"}))


@pytest.mark.sqlite_only(reason="command-line policy over stdio; no store path of its own")
async def test_policy_overrides_come_only_from_the_user(config: ServeConfig) -> None:
    async with stdio(config, "auto", "--allow", "probe_danger", "--ask", "probe_plain") as client:
        assert data(await client.call_tool("probe_danger", {"label": "pre-approved"})) == {"rows": 1}
        gated = await client.call_tool("probe_plain", {"label": "now gated"})
        listing = {t.name: t for t in (await client.list_tools()).tools}
    assert "needs a person's approval" in error_text(gated)
    assert (listing["probe_plain"].meta or {})["managed-tools/tool"]["permissionPolicy"] == "always_ask"
    typo = await cli(config, "pending")  # the data dir exists now
    assert typo.returncode == 0
    bad = await run("serve", "--workspace", str(config.workspace), "--allow", "no_such_tool")
    assert bad.returncode == 2 and "policy names tools that do not exist: no_such_tool" in bad.stderr


async def test_concurrent_retries_of_one_approved_call_are_each_answered(rt: Runtime) -> None:
    """Six retries of one approved 2026-07-28 call sent at once: the call runs once, and every retry is answered
    (the one that ran with its result, the others with a clear refusal), none left waiting."""
    async with client_for(rt, elicitation_callback=answer("accept", {"approve": True})) as client:
        first = await _first_round(client, {"label": "raced"})
        results: list[types.CallToolResult] = []

        async def retry() -> None:
            results.append(
                await client.session.call_tool(
                    "probe_danger", {"label": "raced"}, input_responses=YES, request_state=first.request_state
                )
            )

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(retry)
    ran = [r for r in results if not r.is_error]
    assert len(results) == 6 and len(ran) == 1 and data(ran[0]) == {"rows": 1}
    assert all("already used" in error_text(r) for r in results if r.is_error), [
        error_text(r) for r in results if r.is_error
    ]
    assert await rows(rt) == 1
