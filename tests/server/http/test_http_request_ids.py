"""Two requests with one JSON-RPC id in flight at once (issue 39 F10), over real HTTP with raw requests: a client
library never sends them, a looping or broken client does. In a stateful handshake-era session the second is
refused at once with the id named and the first is answered; in the 2026-07-28 era both are answered."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from test_http import POST_HEADERS, Served, rows, serving

from managed_tools.server.config.serve_config import ServeConfig

pytestmark = pytest.mark.anyio

HANDSHAKE = "2025-11-25"
CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "probe_danger", "arguments": {"label": "x"}},
}


@pytest.fixture
def config(workspace: Path) -> ServeConfig:
    return ServeConfig.build(
        workspace=workspace, data_dir=None, tool_modules=("support.probe_tools",), auto_sandboxed=True
    )


async def messages(response: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line.startswith("data: ") and line[6:].strip():
            yield json.loads(line[6:])


def answer_of(response: httpx2.Response) -> dict[str, Any]:
    """The one JSON-RPC message of a response, sent as JSON or as one SSE event."""
    if response.headers["content-type"].startswith("application/json"):
        return dict(response.json())
    [event] = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    return dict(event)


async def open_session(http: httpx2.AsyncClient, served: Served) -> dict[str, str]:
    """A handshake-era MCP session that offers elicitation; the headers of a request in it."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": HANDSHAKE,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    opened = await http.post(served.mcp, json=initialize, headers=POST_HEADERS)
    headers = {**POST_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": HANDSHAKE}
    initialized = await http.post(
        served.mcp, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    assert initialized.status_code == 202
    return headers


async def test_a_second_request_with_an_id_in_flight_is_refused_and_the_first_answered(config: ServeConfig) -> None:
    """The call waits for a person (its question is on its stream); the same id again, as a number or as a string,
    gets 409 at once, while another session may use that id; once the first is answered the id is free again."""
    async with serving(config) as served, httpx2.AsyncClient(timeout=20) as http:
        headers = await open_session(http, served)
        other = await open_session(http, served)
        asked = anyio.Event()
        question: dict[str, Any] = {}
        answered: list[dict[str, Any]] = []

        async def first() -> None:
            async with http.stream("POST", served.mcp, json=CALL, headers=headers) as response:
                async for message in messages(response):
                    if message.get("method") == "elicitation/create":
                        question.update(message)
                        asked.set()
                    elif message.get("id") == CALL["id"]:
                        answered.append(message)

        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(first)
                await asked.wait()
                again = await http.post(served.mcp, json=CALL, headers=headers)
                as_text = await http.post(served.mcp, json={**CALL, "id": "7"}, headers=headers)
                elsewhere = await http.post(
                    served.mcp, json={"jsonrpc": "2.0", "id": 7, "method": "ping"}, headers=other
                )
                yes = {"action": "accept", "content": {"approve": True}}
                answer = {"jsonrpc": "2.0", "id": question["id"], "result": yes}
                assert (await http.post(served.mcp, json=answer, headers=headers)).status_code == 202
            reused = await http.post(served.mcp, json={"jsonrpc": "2.0", "id": 7, "method": "ping"}, headers=headers)
        count = await rows(served.runtime)
    assert [m.get("result", {}).get("structuredContent") for m in answered] == [{"rows": 1}] and count == 1
    for refused, request_id in ((again, 7), (as_text, "7")):
        assert refused.status_code == 409
        body = answer_of(refused)
        assert body["id"] == request_id and body["error"]["code"] == types.INVALID_REQUEST
        assert f"id {request_id} is already in flight in this MCP session" in body["error"]["message"]
    assert (elsewhere.status_code, answer_of(elsewhere)) == (200, {"jsonrpc": "2.0", "id": 7, "result": {}})
    assert reused.status_code == 200 and answer_of(reused)["id"] == 7


async def test_the_2026_era_answers_both_requests_with_one_id(config: ServeConfig) -> None:
    """Each 2026-07-28 POST is its own exchange (no MCP session): two slow calls with one id, at once, are both
    answered with their own results."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {
        **POST_HEADERS,
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "shell_run",
    }
    answers: dict[str, dict[str, Any]] = {}

    async def call(http: httpx2.AsyncClient, served: Served, word: str) -> None:
        arguments = {"command": f"sleep 1; echo {word}"}
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "shell_run", "arguments": arguments, "_meta": meta},
        }
        answers[word] = answer_of(await http.post(served.mcp, json=body, headers=headers))

    async with serving(config) as served, httpx2.AsyncClient(timeout=20) as http:
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                for word in ("one", "two"):
                    tg.start_soon(call, http, served, word)
    assert {word: (a["id"], a["result"]["structuredContent"]["stdout"]) for word, a in answers.items()} == {
        "one": (7, "one\n"),
        "two": (7, "two\n"),
    }
