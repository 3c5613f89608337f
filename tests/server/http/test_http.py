"""Remote clients over real HTTP: uvicorn on a free loopback port, `mcp.Client` in both eras over Streamable
HTTP and over the legacy SSE transport, and raw requests for everything a client should never send."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from anyio.streams.text import TextReceiveStream
from conftest import ERAS, data, error_text
from mcp import Client, MCPError
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from test_permissions import answer, cli

from managed_tools.server.auth.principal import Principal
from managed_tools.server.cli.command import main
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.http.config import HttpConfig
from managed_tools.server.http.transport import bind, build_app, http_server
from managed_tools.server.mcp.app import PublishedTools
from managed_tools.server.runtime.opening import open_runtime, startup_extensions
from managed_tools.stores import sessions
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

SERVE = [sys.executable, "-m", "managed_tools.server", "serve"]
TOKEN = "s3cret-token-for-tests-0123456789"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
POST_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@pytest.fixture
def config(workspace: Path) -> ServeConfig:
    return ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=("support.probe_tools",))


@dataclass(frozen=True)
class Served:
    url: str
    runtime: Runtime

    @property
    def mcp(self) -> str:
        return self.url + "/mcp"

    @property
    def sse(self) -> str:
        return self.url + "/sse"


@asynccontextmanager
async def serving(config: ServeConfig, **options: Any) -> AsyncIterator[Served]:
    """The real app on a real uvicorn, bound to a free loopback port; the runtime stays inspectable."""
    token = options.pop("token", None)
    environ = {"MANAGED_TOOLS_TOKEN": token} if token else {}
    # Without a test token, the explicit opt-out: these tests are about the transports, not the token.
    options.setdefault("no_token", not token and "oauth" not in options)
    http = HttpConfig.build(transport=options.pop("transport", "http"), port=0, environ=environ, **options)
    extensions = startup_extensions(config)
    async with open_runtime(config, extensions) as runtime:
        server = http_server(build_app(runtime, config, http, extensions), http, "WARNING")
        with bind(http) as sock:
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve, [sock])
                with anyio.fail_after(10):
                    while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to wait on)
                        await anyio.sleep(0.01)
                yield Served(f"http://127.0.0.1:{sock.getsockname()[1]}", runtime)
                await server.stop()


@asynccontextmanager
async def client(
    served: Served, mode: str, headers: dict[str, str] | None = None, **kwargs: Any
) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(served.mcp, http_client=http), mode=mode, **kwargs) as mcp_client,
    ):
        yield mcp_client


def mcp_error(exc: BaseException) -> MCPError:
    """The MCPError a failed connect raised, out of the task groups it travelled through."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    assert isinstance(exc, MCPError), repr(exc)
    return exc


async def session_of(mcp_client: Client) -> str:
    snapshot = data(await mcp_client.call_tool("session_get_snapshot", {}))
    session_id: str = snapshot["sessionId"]
    return session_id


async def wakes(runtime: Runtime, session_id: str) -> list[tuple[str, bool]]:
    """(transport, closed) for each wake of the session, oldest first."""
    async with runtime.db.read() as tx:
        rows = await tx.fetchall(
            "SELECT transport, ended_at FROM wakes WHERE session_id = ? ORDER BY started_at, rowid", (session_id,)
        )
    return [(row["transport"], row["ended_at"] is not None) for row in rows]


async def eventually_closed(runtime: Runtime, session_id: str) -> list[tuple[str, bool]]:
    with anyio.fail_after(5):
        while not all(closed for _, closed in await wakes(runtime, session_id)):  # noqa: ASYNC110 (in the database)
            await anyio.sleep(0.02)
    return await wakes(runtime, session_id)


# ---- the catalogue over both transports, both eras ----------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_streamable_http_in_both_eras(config: ServeConfig, mode: str) -> None:
    async with serving(config) as served:
        async with client(served, mode) as mcp_client:
            listing = await mcp_client.list_tools()
            events = data(await mcp_client.call_tool("session_get_events", {"limit": 5}))
            bad = await mcp_client.call_tool("session_get_events", {"limit": -1})
            session_id = await session_of(mcp_client)
            version = mcp_client.protocol_version
        closed = await eventually_closed(served.runtime, session_id) if mode == "legacy" else None
    assert "probe_danger" in {t.name for t in listing.tools}
    assert version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    transport = "http" if mode == "legacy" else "http-sessionless"
    assert events["events"][0]["payload"]["transport"] == transport
    assert "limit" in error_text(bad)
    if closed is not None:  # the client's DELETE ended the MCP session, and with it the wake
        assert closed == [("http", True)]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_call_never_rebuilds_the_tool_list(
    config: ServeConfig, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 2026-07-28 transport checks `Mcp-Param-*` headers against the called tool's input schema; without the
    server's own schema lookup the SDK runs the whole tools/list handler for every call with arguments."""
    listed: list[int] = []
    original = PublishedTools.listed

    def counted(self: PublishedTools, principal: Principal) -> list[types.Tool]:
        listed.append(1)
        return original(self, principal)

    monkeypatch.setattr(PublishedTools, "listed", counted)
    async with serving(config) as served, client(served, mode) as mcp_client:
        await mcp_client.list_tools()
        before = len(listed)
        for _ in range(3):
            assert "events" in data(await mcp_client.call_tool("session_get_events", {"limit": 1}))
    assert before >= 1
    assert len(listed) == before


@pytest.mark.parametrize("mode", ERAS)
async def test_legacy_sse_transport_in_both_eras(config: ServeConfig, mode: str) -> None:
    async with serving(config) as served:
        async with Client(sse_client(served.sse), mode=mode) as mcp_client:
            events = data(await mcp_client.call_tool("session_get_events", {"limit": 5}))
            session_id = await session_of(mcp_client)
        closed = await eventually_closed(served.runtime, session_id)
    assert events["events"][0]["payload"]["transport"] == "sse"
    assert closed == [("sse", True)]


async def test_sse_only_server_has_no_streamable_endpoint(config: ServeConfig) -> None:
    async with serving(config, transport="sse") as served:
        async with Client(sse_client(served.sse), mode="legacy") as mcp_client:
            assert data(await mcp_client.call_tool("environment_describe", {}))["agentId"] == "default"
        async with httpx2.AsyncClient() as http:
            missing = await http.post(served.mcp, json=INITIALIZE, headers=POST_HEADERS)
    assert missing.status_code == 404


# ---- sessions over HTTP --------------------------------------------------------------------------------------


async def test_concurrent_mcp_sessions_do_not_share_anything(config: ServeConfig) -> None:
    async with serving(config) as served, client(served, "legacy") as first, client(served, "legacy") as second:
        ids = (await session_of(first), await session_of(second))
        blocked = await second.call_tool("probe_danger", {"label": "theirs"})
        first_events = data(await first.call_tool("session_get_events", {"limit": 50}))
        first_describe = data(await first.call_tool("permissions_describe", {}))
        first_wakes, second_wakes = await wakes(served.runtime, ids[0]), await wakes(served.runtime, ids[1])
    assert ids[0] != ids[1] and first_events["sessionId"] == ids[0]
    assert "probe_danger" not in json.dumps(first_events)  # the other session's call is not in our log
    assert (blocked.meta or {})["managed-tools/requiresAction"]["toolName"] == "probe_danger"
    assert first_describe["openRequests"] == []  # nor its pending request
    assert first_wakes == second_wakes == [("http", False)]


async def test_a_remote_client_resumes_a_named_session(config: ServeConfig) -> None:
    async with serving(config) as served:
        async with client(served, "legacy") as mcp_client:
            named = await session_of(mcp_client)
        header = {"Mcp-Managed-Session": named}
        resumed = []
        for mode in ERAS:
            async with client(served, mode, headers=header) as mcp_client:
                resumed.append(await session_of(mcp_client))
        async with Client(sse_client(served.sse, headers=header), mode="legacy") as mcp_client:
            resumed.append(await session_of(mcp_client))
        # One stateful session per MCP session and SSE stream; 2026-07-28 requests share one sessionless wake.
        transports = [transport for transport, _ in await wakes(served.runtime, named)]
    assert resumed == [named, named, named]
    assert sorted(transports) == ["http", "http", "http-sessionless", "sse"]


async def test_requests_without_an_mcp_session_share_one_durable_session(config: ServeConfig) -> None:
    async with serving(config) as served, client(served, "auto") as one, client(served, "auto") as two:
        modern = {await session_of(one), await session_of(two)}
    async with (
        serving(config, stateless=True) as served,
        client(served, "legacy") as one,
        client(served, "legacy") as two,
    ):
        stateless = {await session_of(one), await session_of(two)}
        transports = [transport for transport, _ in await wakes(served.runtime, next(iter(stateless)))]
    assert len(modern) == 1 and len(stateless) == 1
    assert transports == ["http-sessionless"]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_session_header_must_name_a_session_of_this_agent(config: ServeConfig, mode: str) -> None:
    async with open_runtime(config) as runtime, runtime.db.write() as tx:
        foreign = (await sessions.create_session(tx, "someone-else")).id
    async with serving(config) as served:
        for value in ("no-such-session", foreign):
            with pytest.raises(BaseException) as refused:
                async with client(served, mode, headers={"Mcp-Managed-Session": value}) as mcp_client:
                    await mcp_client.list_tools()
            assert f"Session {value} is not available to agent default" in mcp_error(refused.value).error.message
        async with httpx2.AsyncClient() as http:
            malformed = await http.post(
                served.mcp, json=INITIALIZE, headers={**POST_HEADERS, "Mcp-Managed-Session": "x" * 65}
            )
            sse = await http.get(served.sse, headers={"Mcp-Managed-Session": foreign})
    assert malformed.status_code == 400 and "must be a session id" in malformed.json()["error"]["message"]
    assert sse.status_code == 400


# ---- permission pauses over HTTP -----------------------------------------------------------------------------


async def rows(runtime: Runtime) -> int:
    async with runtime.db.read() as tx:
        exists = await tx.scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'probe'")
        return int(await tx.scalar("SELECT COUNT(*) FROM probe")) if exists else 0


@pytest.mark.parametrize(
    ("tool", "arguments"), [("probe_danger", {"label": "raced"}), ("shell_run", {"command": "echo raced >> ran.txt"})]
)
async def test_concurrent_retries_of_one_approved_call_are_each_answered_over_http(
    config: ServeConfig, tool: str, arguments: dict[str, Any]
) -> None:
    """Six retries of one approved call, sent at once over stateless HTTP with the same sealed requestState: the
    call runs once and every retry is answered at once."""
    yes: types.InputResponses = {"consent": types.ElicitResult(action="accept", content={"approve": True})}
    approve = answer("accept", {"approve": True})
    async with serving(config) as served, client(served, "auto", elicitation_callback=approve) as mcp_client:
        first = await mcp_client.session.call_tool(tool, arguments, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        results: list[types.CallToolResult] = []

        async def retry() -> None:
            results.append(
                await mcp_client.session.call_tool(
                    tool, arguments, input_responses=yes, request_state=first.request_state
                )
            )

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(retry)
        count = (
            await rows(served.runtime)
            if tool == "probe_danger"
            else len((config.workspace / "ran.txt").read_text().split())
        )
    assert len(results) == 6 and sum(not r.is_error for r in results) == 1 and count == 1
    assert all("already used" in error_text(r) for r in results if r.is_error)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_permission_pause_over_http(config: ServeConfig, mode: str) -> None:
    # Handshake era: elicitation/create on the call's own SSE stream; 2026-07-28: an input-required round.
    async with serving(config) as served:
        approve = answer("accept", {"approve": True})
        async with client(served, mode, elicitation_callback=approve) as mcp_client:
            ran = data(await mcp_client.call_tool("probe_danger", {"label": "remote"}))
        async with client(served, mode, elicitation_callback=answer("decline")) as mcp_client:
            refused = await mcp_client.call_tool("probe_danger", {"label": "remote"})
        assert await rows(served.runtime) == 1
    assert ran == {"rows": 1}
    assert "denied confirmation" in error_text(refused)


async def test_stateless_http_fails_closed_and_a_person_approves_out_of_band(config: ServeConfig) -> None:
    # The client offers elicitation, but a stateless server has no stream to push the question on.
    approve = answer("accept", {"approve": True})
    async with serving(config, stateless=True) as served, client(served, "legacy", elicitation_callback=approve) as c:
        blocked = await c.call_tool("probe_danger", {"label": "stateless"})
        request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
        assert await rows(served.runtime) == 0
        assert (await cli(config, "approve", request_id)).returncode == 0
        assert data(await c.call_tool("probe_danger", {"label": "stateless"})) == {"rows": 1}
    assert f"managed-tools approve {request_id}" in error_text(blocked)


# ---- what an attacker or a broken client sends ---------------------------------------------------------------


async def test_host_and_origin_are_checked_on_every_endpoint(config: ServeConfig) -> None:
    async with serving(config, allowed_origins=("https://app.example.com",)) as served, httpx2.AsyncClient() as http:
        rebinding = await http.post(served.mcp, json=INITIALIZE, headers={**POST_HEADERS, "Host": "evil.example"})
        foreign = await http.post(
            served.mcp, json=INITIALIZE, headers={**POST_HEADERS, "Origin": "http://evil.example"}
        )
        sse = await http.get(served.sse, headers={"Origin": "http://evil.example"})
        messages = await http.post(served.url + "/messages/?session_id=0", json={}, headers={"Host": "evil.example"})
        listed = await http.post(
            served.mcp, json=INITIALIZE, headers={**POST_HEADERS, "Origin": "https://app.example.com"}
        )
        health = await http.get(served.url + "/healthz", headers={"Host": "anything.example"})
    assert (rebinding.status_code, foreign.status_code, sse.status_code, messages.status_code) == (421, 403, 403, 421)
    assert listed.status_code == 200
    assert health.status_code == 200 and health.json() == {"status": "ok"}


async def test_every_request_needs_the_token_when_one_is_set(
    config: ServeConfig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    async with serving(config, token=TOKEN) as served:
        async with httpx2.AsyncClient() as http:
            missing = await http.post(served.mcp, json=INITIALIZE, headers=POST_HEADERS)
            wrong = await http.post(served.mcp, json=INITIALIZE, headers={**POST_HEADERS, "Authorization": "Bearer no"})
            sse = await http.get(served.sse)
            messages = await http.post(served.url + "/messages/?session_id=0", json={})
            health = await http.get(served.url + "/healthz")
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        for mode in ERAS:
            async with client(served, mode, headers=bearer) as mcp_client:
                data(await mcp_client.call_tool("environment_describe", {}))
        async with Client(sse_client(served.sse, headers=bearer), mode="legacy") as mcp_client:
            data(await mcp_client.call_tool("environment_describe", {}))
    assert [r.status_code for r in (missing, wrong, sse, messages)] == [401, 401, 401, 401]
    assert missing.headers["www-authenticate"] == 'Bearer realm="managed-tools"'
    assert wrong.headers["www-authenticate"] == 'Bearer realm="managed-tools", error="invalid_token"'
    assert "bearer token" in missing.json()["error"]["message"]
    assert health.status_code == 200
    everything = caplog.text + "".join(r.text for r in (missing, wrong, sse, messages, health))
    assert TOKEN not in everything


async def test_oversized_bodies_are_refused_on_both_post_endpoints(config: ServeConfig) -> None:
    big = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * 5000}}
    async with serving(config, max_request_bytes=4096) as served, httpx2.AsyncClient() as http:
        streamable = await http.post(served.mcp, content=json.dumps(big), headers=POST_HEADERS)
        messages = await http.post(
            served.url + "/messages/?session_id=" + "0" * 32, content=json.dumps(big), headers=POST_HEADERS
        )
        fine = await http.post(served.mcp, json=INITIALIZE, headers=POST_HEADERS)
    assert (streamable.status_code, messages.status_code, fine.status_code) == (413, 413, 200)


async def test_malformed_requests_and_unknown_sessions_get_clear_errors(config: ServeConfig) -> None:
    async with serving(config) as served, httpx2.AsyncClient() as http:
        garbage = await http.post(served.mcp, content=b"{not json", headers=POST_HEADERS)
        unknown = await http.post(served.mcp, json=INITIALIZE, headers={**POST_HEADERS, "mcp-session-id": "f" * 32})
        no_sse_session = await http.post(served.url + "/messages/?session_id=" + "0" * 32, json=INITIALIZE)
        bad_sse_session = await http.post(served.url + "/messages/?session_id=nope", json=INITIALIZE)
        opened = [await http.post(served.mcp, json=INITIALIZE, headers=POST_HEADERS) for _ in range(2)]
        async with client(served, "legacy") as mcp_client:  # the server is still fine
            data(await mcp_client.call_tool("environment_describe", {}))
    ids = [response.headers["mcp-session-id"] for response in opened]
    assert ids[0] != ids[1] and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)  # random uuid4, 122 bits
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == types.PARSE_ERROR
    assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "Session not found"
    assert (no_sse_session.status_code, bad_sse_session.status_code) == (404, 400)


async def test_the_session_limit_refuses_more_and_recovers(config: ServeConfig) -> None:
    async with serving(config, max_sessions=2) as served:
        async with client(served, "legacy") as one, client(served, "legacy") as two:
            with pytest.raises(BaseException) as refused:
                async with client(served, "legacy") as three:
                    await three.list_tools()
            assert mcp_error(refused.value).error.message == "Too many open sessions"
            await one.list_tools()
            await two.list_tools()
        async with client(served, "legacy") as again:
            data(await again.call_tool("environment_describe", {}))
        async with (
            Client(sse_client(served.sse), mode="legacy"),
            Client(sse_client(served.sse), mode="legacy"),
            httpx2.AsyncClient() as http,
        ):
            third_stream = await http.get(served.sse)
    assert third_stream.status_code == 503


async def test_abandoned_sessions_make_room_for_a_new_client(config: ServeConfig) -> None:
    """Sessions opened and abandoned (no request in flight) used to fill the bound until their idle timeout,
    30 minutes of 503 for every new client; now the least recently used idle one ends to make room."""
    async with serving(config, max_sessions=3) as served, httpx2.AsyncClient() as http:
        abandoned = [
            (await http.post(served.mcp, json=INITIALIZE, headers=POST_HEADERS)).headers["mcp-session-id"]
            for _ in range(3)
        ]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        used = await http.post(served.mcp, json=ping, headers={**POST_HEADERS, "Mcp-Session-Id": abandoned[0]})
        async with client(served, "legacy") as new:  # served: the least recently used, abandoned[1], ends
            data(await new.call_tool("environment_describe", {}))
        asked = [
            (await http.post(served.mcp, json=ping, headers={**POST_HEADERS, "Mcp-Session-Id": s})).status_code
            for s in abandoned
        ]
    assert used.status_code == 200
    assert asked == [200, 404, 200]


# ---- the command line --------------------------------------------------------------------------------------


def test_refuses_to_start_without_what_a_remote_bind_needs(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MANAGED_TOOLS_TOKEN", raising=False)
    empty = tmp_path / "empty-token"
    empty.write_text("  \n")
    cases = {
        ("--transport", "http", "--host", "0.0.0.0"): "Binding to 0.0.0.0 exposes the server beyond this machine",
        ("--transport", "http", "--token-file", str(tmp_path / "absent")): "Cannot read the token file",
        ("--transport", "sse", "--token-file", str(empty)): f"The token file {empty} is empty.",
        ("--port", "9000"): "--port applies to --transport http or sse.",
        ("--transport", "sse", "--stateless"): "--stateless applies to Streamable HTTP (--transport http)",
        ("--transport", "http", "--port", "70000"): "--port: Input should be less than or equal to 65535",
        ("--transport", "http", "--allowed-host", "localhost/x"): "--allowed-host: Value error, 'localhost/x' is not",
        ("--transport", "http", "--allowed-origin", "localhost:*"): "'localhost:*' is not an origin: http:// or",
        ("--transport", "http", "--header-timeout", "0"): "--header-timeout: Input should be greater than 0",
        ("--max-connections", "5"): "--max-connections applies to --transport http or sse.",
        ("--workers", "2"): "--workers applies to --transport http or sse.",
        ("--transport", "http", "--workers", "0"): "--workers: Input should be greater than or equal to 1",
    }
    for argv, message in cases.items():
        assert main(["serve", "--workspace", str(workspace), *argv]) == 2, argv
        assert message in capsys.readouterr().err, argv
    with pytest.raises(SystemExit):  # argparse's own usage error
        main(["serve", "--workspace", str(workspace), "--transport", "http", "--workers", "many"])
    assert "argument --workers: takes a number of processes or auto" in capsys.readouterr().err


async def test_the_cli_serves_http_and_shuts_down_gracefully(workspace: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    argv = [
        *SERVE,
        "--workspace",
        str(workspace),
        "--transport",
        "http",
        "--port",
        "0",
        "--token-file",
        str(token_file),
    ]
    async with await anyio.open_process(argv, stdin=subprocess.DEVNULL) as proc:
        assert proc.stderr is not None
        stderr = TextReceiveStream(proc.stderr)
        try:
            seen = ""
            with anyio.fail_after(30):
                while "\n" not in seen:
                    seen += await stderr.receive()
            assert "every request needs the bearer token" in seen and TOKEN not in seen
            url = seen.split("Streamable HTTP at ")[1].split(",")[0]
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}", **POST_HEADERS}) as http:
                opened = await http.post(url, json=INITIALIZE)
                session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
                await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
                call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "environment_describe"}}
                described = await http.post(url, json=call, headers=session)
        finally:
            proc.send_signal(signal.SIGTERM)  # with that MCP session still open
        with anyio.fail_after(30):
            seen += "".join([chunk async for chunk in stderr])
            await proc.wait()
    assert '"agentId":"default"' in described.text
    assert proc.returncode == 128 + signal.SIGTERM, (
        seen
    )  # stopped by the signal, cleanly (tests/server/stdio/test_shutdown.py)
    assert TOKEN not in seen
    async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=None)) as runtime, runtime.db.read() as tx:
        closed = [row["ended_at"] is not None for row in await tx.fetchall("SELECT ended_at FROM wakes")]
    assert closed == [True]  # shutdown ended the MCP session, and with it the wake
