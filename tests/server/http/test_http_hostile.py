"""Slow and hostile HTTP clients against the real server: raw sockets to a real uvicorn on 127.0.0.1, with short
configured deadlines, and the real SQLite file checked for what they leave behind."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream
from conftest import data
from mcp import Client
from mcp.client.sse import sse_client
from test_http import INITIALIZE, POST_HEADERS, TOKEN, Served, client, serving

from managed_tools.server.config.serve_config import ServeConfig

pytestmark = pytest.mark.anyio


@pytest.fixture
def config(workspace: Path) -> ServeConfig:
    return ServeConfig.build(workspace=workspace, data_dir=None)


FAST = {"header_timeout_seconds": 1.0, "body_timeout_seconds": 1.0}


def port_of(served: Served) -> int:
    port = urlsplit(served.url).port
    assert port is not None
    return port


@asynccontextmanager
async def raw(served: Served, count: int = 1) -> AsyncIterator[list[SocketStream]]:
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(await anyio.connect_tcp("127.0.0.1", port_of(served))) for _ in range(count)
        ]


async def until_closed(stream: SocketStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    try:
        while len(received) < 65536:
            received += await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
        return received
    raise AssertionError(f"the server kept sending: {received[:200]!r}")


def request_head(path: str, *, length: int | None = None) -> bytes:
    body = f"content-length: {length}\r\ncontent-type: application/json\r\n" if length is not None else ""
    accept = "accept: application/json, text/event-stream\r\n"
    return f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{accept}{body}\r\n".encode()


def durable_rows(config: ServeConfig) -> tuple[int, int]:
    """(sessions, wakes) in the real state database."""
    with sqlite3.connect(config.state_path) as db:
        return db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0], db.execute(
            "SELECT COUNT(*) FROM wakes"
        ).fetchone()[0]


# ---- deadlines -----------------------------------------------------------------------------------------------


async def test_half_sent_requests_are_cut_off_while_others_are_served(config: ServeConfig) -> None:
    answers: list[bytes] = []
    closed_after: list[float] = []
    async with serving(config, **FAST) as served, raw(served, 40) as streams:
        started = time.monotonic()
        for index, stream in enumerate(streams):  # a request line, or headers that never end
            await stream.send(
                b"POST /mcp HTTP/1.1\r\n" if index % 2 else b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-a: "
            )

        async def trickle(stream: SocketStream) -> None:  # slowloris: a byte every 0.2 s does not reset the clock
            with suppress(anyio.BrokenResourceError):
                for _ in range(15):
                    await stream.send(b"a")
                    await anyio.sleep(0.2)

        async def watch(stream: SocketStream) -> None:
            answers.append(await until_closed(stream))
            closed_after.append(time.monotonic() - started)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for stream in streams[:5]:
                    tg.start_soon(trickle, stream)
                for stream in streams:
                    tg.start_soon(watch, stream)
                async with client(served, "legacy") as mcp_client:  # a normal client meanwhile
                    described = data(await mcp_client.call_tool("environment_describe", {}))
    assert described["agentId"] == "default"
    assert len(answers) == 40 and max(closed_after) < 2.0, closed_after
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers), {a[:40] for a in answers}


async def test_a_slow_body_is_cut_off(config: ServeConfig) -> None:
    async with serving(config, **FAST) as served, raw(served) as (stream,):
        started = time.monotonic()
        await stream.send(request_head("/mcp", length=len(b'{"jsonrpc": "2.0"}') + 100))
        for _ in range(3):  # part of the body, slowly; the rest never comes
            await stream.send(b" ")
            await anyio.sleep(0.2)
        with anyio.fail_after(2.5):
            answer = await until_closed(stream)
        elapsed = time.monotonic() - started
        async with client(served, "legacy") as mcp_client:
            await mcp_client.list_tools()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    assert elapsed < 2.0, elapsed


async def test_the_header_deadline_applies_again_on_a_kept_alive_connection(config: ServeConfig) -> None:
    async with serving(config, **FAST) as served, raw(served, 3) as (stream, kept_idle, silent):
        head = request_head("/healthz").replace(b"POST", b"GET")
        for kept in (stream, kept_idle):
            await kept.send(head)
            assert (await kept.receive()).startswith(b"HTTP/1.1 200 ")
        await stream.send(head[:20])  # a second request, never finished
        with anyio.fail_after(2.5):
            rest = [await until_closed(each) for each in (stream, kept_idle, silent)]
    assert rest[0].startswith(b"HTTP/1.1 408 ")
    assert rest[1:] == [b"", b""]  # connections that started no request just close


# ---- the connection bound ------------------------------------------------------------------------------------


async def test_connections_beyond_the_bound_are_refused_at_once(config: ServeConfig) -> None:
    async with serving(config, max_connections=5) as served:
        async with raw(served, 5) as held:
            for stream in held:  # each server-side connection exists once it has answered something
                await stream.send(request_head("/healthz").replace(b"POST", b"GET"))
                assert (await stream.receive()).startswith(b"HTTP/1.1 200 ")
            started = time.monotonic()
            async with raw(served, 3) as extra:
                with anyio.fail_after(1):
                    refused = [await until_closed(stream) for stream in extra]
            elapsed = time.monotonic() - started
        await anyio.sleep(0.1)  # for the server to see those connections close
        async with client(served, "legacy") as mcp_client:  # the bound frees up with the connections
            await mcp_client.list_tools()
    assert all(answer.startswith(b"HTTP/1.1 503 ") for answer in refused), refused
    assert elapsed < 0.5, elapsed


# ---- authentication ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/mcp", "/messages/?session_id=" + "0" * 32, "/sse", "/nowhere"])
async def test_a_request_without_the_token_is_refused_before_its_body(config: ServeConfig, path: str) -> None:
    async with serving(config, token=TOKEN) as served, raw(served) as (stream,):
        started = time.monotonic()
        await stream.send(request_head(path, length=1_000_000))  # a large body announced, none sent
        with anyio.fail_after(1):
            answer = await until_closed(stream)  # the answer, then the end: the body is never waited for
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:80]
    assert b"www-authenticate: Bearer" in answer
    assert elapsed < 0.5, elapsed


async def test_sse_streams_need_the_token_and_leave_no_session_until_used(config: ServeConfig) -> None:
    async with serving(config, token=TOKEN) as served, httpx2.AsyncClient() as http:
        refused = [
            (await http.get(served.sse, headers=headers)).status_code
            for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"})
        ]
    assert refused == [401, 401]
    assert durable_rows(config) == (0, 0)

    async with serving(config) as served:  # no token, no Origin: a stream opens, like a POST to /mcp
        for _ in range(5):
            async with httpx2.AsyncClient() as http, http.stream("GET", served.sse) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: /messages/"):
                        break
            async with httpx2.AsyncClient() as http:
                await http.post(served.mcp, json=INITIALIZE, headers=POST_HEADERS)
        async with Client(sse_client(served.sse), mode="legacy") as mcp_client:
            await mcp_client.list_tools()
        unused = durable_rows(config)
        async with Client(sse_client(served.sse), mode="legacy") as mcp_client:
            data(await mcp_client.call_tool("environment_describe", {}))
        used = durable_rows(config)
    assert unused == (0, 0)
    assert used == (1, 1)


# ---- Host and Origin -----------------------------------------------------------------------------------------


async def test_host_and_origin_match_exactly(config: ServeConfig) -> None:
    async with (
        serving(config, allowed_hosts=("tools.example.lan:8080",), allowed_origins=("https://app.example.com",)) as s,
        httpx2.AsyncClient() as http,
    ):
        port = port_of(s)

        async def status(**headers: str) -> int:
            return (await http.post(s.mcp, json=INITIALIZE, headers={**POST_HEADERS, **headers})).status_code

        hosts = {
            host: await status(Host=host)
            for host in (
                "localhost:evil.example",
                "127.0.0.1.evil.example:8765",
                "localhost.evil.example",
                "tools.example.lan:80801",
                "tools.example.lan",
                "localhost:8765@evil.example",
                "[::1]:8765.evil",
                "localhost:99999",
                f"localhost:{port}",
                "LOCALHOST",
                f"127.0.0.1:{port}",
                "[::1]:1",
                "tools.example.lan:8080",
            )
        }
        origins = {
            origin: await status(Origin=origin)
            for origin in (
                "http://localhost:8765.evil.example",
                "http://localhost.evil.example",
                "http://127.0.0.1:8765@evil.example",
                "https://localhost:8765",
                "http://app.example.com",
                "https://app.example.com.evil.example",
                "null",
                f"http://localhost:{port}",
                f"http://127.0.0.1:{port}",
                "http://[::1]:9",
                "https://app.example.com",
                "https://app.example.com:8443",
            )
        }
    assert hosts == {
        "localhost:evil.example": 421,
        "127.0.0.1.evil.example:8765": 421,
        "localhost.evil.example": 421,
        "tools.example.lan:80801": 421,
        "tools.example.lan": 421,
        "localhost:8765@evil.example": 421,
        "[::1]:8765.evil": 421,
        "localhost:99999": 421,
        f"localhost:{port}": 200,
        "LOCALHOST": 200,
        f"127.0.0.1:{port}": 200,
        "[::1]:1": 200,
        "tools.example.lan:8080": 200,
    }
    assert origins == {
        "http://localhost:8765.evil.example": 403,
        "http://localhost.evil.example": 403,
        "http://127.0.0.1:8765@evil.example": 403,
        "https://localhost:8765": 403,
        "http://app.example.com": 403,
        "https://app.example.com.evil.example": 403,
        "null": 403,
        f"http://localhost:{port}": 200,
        f"http://127.0.0.1:{port}": 200,
        "http://[::1]:9": 200,
        "https://app.example.com": 200,
        "https://app.example.com:8443": 200,
    }


# ---- what a refusal says -------------------------------------------------------------------------------------


async def test_no_host_path_in_what_http_answers(config: ServeConfig) -> None:
    async with serving(config, token=TOKEN, max_request_bytes=4096) as served, httpx2.AsyncClient() as http:
        bearer = {**POST_HEADERS, "Authorization": f"Bearer {TOKEN}"}
        answers = [
            await http.get(served.url + "/healthz"),
            await http.post(served.mcp, json=INITIALIZE, headers=POST_HEADERS),
            await http.post(served.mcp, json=INITIALIZE, headers={**bearer, "Host": "evil.example"}),
            await http.post(served.mcp, json=INITIALIZE, headers={**bearer, "Origin": "http://evil.example"}),
            await http.post(served.mcp, content=b"{", headers=bearer),
            await http.post(served.mcp, content=b"x" * 5000, headers=bearer),
            await http.post(served.mcp, json=INITIALIZE, headers={**bearer, "Mcp-Managed-Session": "nope"}),
            await http.get(served.url + "/nowhere", headers=bearer),
        ]
    text = "".join(answer.text + str(answer.headers) for answer in answers)
    for path in (config.workspace, config.data_dir):
        assert str(path) not in text
    assert [answer.status_code for answer in answers] == [200, 401, 421, 403, 400, 413, 400, 404]
