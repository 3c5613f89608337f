"""Each principal's quota of an HTTP server's calls (config.json `quotas`, server/http/quotas.py): calls per minute,
calls running at once and permission requests waiting, each past its bound a 429 with Retry-After that names the
bound, for that principal only. Real uvicorn, real clients, real OAuth tokens from a local issuer."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx2
import pytest
import test_http as plain
import test_oauth as oauth
from conftest import data, error_text
from mcp import Client, MCPError
from mcp.client.sse import sse_client
from support.oauth_issuer import Issuer
from test_oauth import issuer  # noqa: F401 (the local issuer, a fixture)

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.config.user_config import Quota, QuotasConfig
from managed_tools.stores import approvals, sessions

pytestmark = pytest.mark.anyio

CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "environment_describe", "arguments": {}}}
SLOW = {"command": "sleep 2", "waitMs": 10_000}


def with_quotas(config: ServeConfig, **quotas: Quota) -> ServeConfig:
    return config.model_copy(update={"quotas": QuotasConfig(**quotas)})


async def raw_call(url: str, token: str | None = None) -> httpx2.Response:
    headers = {**plain.POST_HEADERS, **({"authorization": f"Bearer {token}"} if token else {})}
    async with httpx2.AsyncClient() as http:
        return await http.post(url, json=CALL, headers=headers)


async def refused(mcp: Client) -> str:
    """A call's refusal: the 429's message over Streamable HTTP, an error result over legacy SSE."""
    try:
        result = await mcp.call_tool("environment_describe", {})
    except MCPError as exc:
        return str(exc)
    assert result.is_error and result.structured_content is None
    return error_text(result)


def refusal(response: httpx2.Response) -> str:
    assert response.status_code == 429, (response.status_code, response.text)
    assert 1 <= int(response.headers["retry-after"]) <= 60
    message: str = response.json()["error"]["message"]
    return message


async def test_calls_per_minute_bound_one_principal_and_not_another(
    config: ServeConfig, request: pytest.FixtureRequest
) -> None:
    local: Issuer = request.getfixturevalue("issuer")
    limited = with_quotas(config, oauth=Quota(calls_per_minute=3))
    async with oauth.serving(limited, local) as served:
        alice, bob = local.token(served.resource), local.token(served.resource, sub="bob")
        async with oauth.client(served, alice) as mcp:
            for _ in range(3):
                assert data(await mcp.call_tool("environment_describe", {}))
            with pytest.raises(MCPError, match="your quota is 3"):
                await mcp.call_tool("environment_describe", {})
            await mcp.list_tools()  # only calls count
        assert "in the last minute, your quota is 3" in refusal(await raw_call(served.resource, alice))
        async with oauth.client(served, bob, "legacy") as bobs:
            assert data(await bobs.call_tool("environment_describe", {}))


async def test_the_local_principal_has_no_quota_unless_configured(config: ServeConfig) -> None:
    async with plain.serving(config) as served, plain.client(served, "auto") as mcp:
        for _ in range(30):
            assert data(await mcp.call_tool("environment_describe", {}))
    limited = with_quotas(config, token=Quota(calls_per_minute=2))
    async with plain.serving(limited) as served, plain.client(served, "legacy") as mcp:
        for _ in range(2):
            assert data(await mcp.call_tool("environment_describe", {}))
        assert "your quota is 2" in refusal(await raw_call(served.mcp))


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_calls_running_at_once_are_bounded_on_both_transports(workspace: Path, transport: str) -> None:
    allowed = ServeConfig.build(workspace=workspace, data_dir=None, allow=("shell_run",))
    limited = with_quotas(allowed, token=Quota(concurrent_calls=1))
    async with plain.serving(limited, transport=transport) as served:
        over_sse = Client(sse_client(served.sse), mode="legacy")
        connected = plain.client(served, "legacy") if transport == "http" else over_sse
        async with connected as mcp, anyio.create_task_group() as tg:
            finished = anyio.Event()

            async def slow() -> None:
                assert data(await mcp.call_tool("shell_run", SLOW))["exitCode"] == 0
                finished.set()

            tg.start_soon(slow)
            await anyio.sleep(0.8)  # the slow call is running
            assert "1 tool calls running, and your quota is 1 at once" in await refused(mcp)
            with anyio.fail_after(30):
                await finished.wait()
            assert data(await mcp.call_tool("environment_describe", {}))  # its slot is free again


async def test_waiting_permission_requests_hold_new_calls_until_answered(config: ServeConfig) -> None:
    limited = with_quotas(config, token=Quota(pending_approvals=1))
    async with plain.serving(limited) as served, plain.client(served, "legacy") as mcp:
        assert data(await mcp.call_tool("environment_describe", {}))
        async with served.runtime.db.write() as tx:
            session = await sessions.create_session(tx, "default", owner=sessions.LOCAL_OWNER)
            asked = await approvals.create(
                tx, session_id=session.id, wake_id=None, kind="tool_confirmation", tool_name="shell_run",
                arguments={"command": "make deploy"}, args_digest="0" * 64, channel="out_of_band", question="Run?",
            )  # fmt: skip
        await anyio.sleep(1.1)  # the count is at most a second old
        message = refusal(await raw_call(served.mcp))
        assert "1 permission requests waiting for a person" in message and "managed-tools pending" in message
        async with served.runtime.db.write() as tx:
            await approvals.decide(tx, asked.id, approved=False, by="test")
        await anyio.sleep(1.1)
        assert data(await mcp.call_tool("environment_describe", {}))


async def test_a_batch_counts_each_call_and_a_body_that_is_not_json_passes_to_the_transport(
    config: ServeConfig,
) -> None:
    limited = with_quotas(config, token=Quota(calls_per_minute=2))
    async with plain.serving(limited) as served, httpx2.AsyncClient() as http:
        batch = [{**CALL, "id": n} for n in range(3)]
        too_many = await http.post(served.mcp, content=json.dumps(batch), headers=plain.POST_HEADERS)
        assert "your quota is 2" in refusal(too_many)
        garbled = await http.post(served.mcp, content=b"{not json", headers=plain.POST_HEADERS)
        assert garbled.status_code == 400  # the transport's own answer
        listing = {**CALL, "method": "tools/list", "params": {}}
        for _ in range(4):
            listed = await http.post(served.mcp, json=listing, headers=plain.POST_HEADERS)
            assert listed.status_code != 429
