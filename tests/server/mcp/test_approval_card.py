"""Approval cards for MCP Apps hosts: a real MCP client that advertises Apps (and no elicitation), the card read as
the `ui://` resource its paused call points at, rendered in real Chromium inside a sandboxed iframe by a minimal
host that relays the card's `tools/call` to that client, as an Apps host does. The card shows exactly what runs;
its answer is bound to its request and session, and taken once.

With MANAGED_TOOLS_SCREENSHOTS=docs/images the test saves docs/images/approval-card.png."""

from __future__ import annotations

import os
from html import escape
from pathlib import Path
from typing import Any

import pytest
from conftest import data, error_text
from mcp import Client, MCPError
from mcp.client import advertise
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from mcp_types import CallToolResult, TextResourceContents
from test_pages import browser_test

from managed_tools.server.mcp.app import build_server
from managed_tools.server.mcp.approval_card import CARD_TOOL
from managed_tools.stores import approvals
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parents[2]
APPS = advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})
COMMAND = "rm -rf build && python -m pytest -q"
# A minimal MCP Apps host: the card in a sandboxed iframe (scripts only, an opaque origin), its JSON-RPC messages
# answered: `ui/initialize`, and `tools/call` relayed to the test's MCP client (`window.callTool`).
HOST = """<!doctype html><title>host</title><body><script>
window.seen = [];
window.show = (html) => {
  const old = document.getElementById("card");
  if (old) old.remove();
  const frame = document.createElement("iframe");
  frame.id = "card"; frame.sandbox = "allow-scripts"; frame.width = 760; frame.height = 420; frame.srcdoc = html;
  document.body.append(frame);
};
window.addEventListener("message", async (event) => {
  const frame = document.getElementById("card"), m = event.data;
  if (!frame || event.source !== frame.contentWindow) return;
  window.seen.push(m.method);
  const reply = (result) => frame.contentWindow.postMessage({jsonrpc: "2.0", id: m.id, result: result}, "*");
  if (m.method === "ui/initialize") reply({protocolVersion: "2026-01-26", hostInfo: {name: "test host"},
    hostCapabilities: {}, hostContext: {}});
  if (m.method === "tools/call") reply(await window.callTool(m.params.name, m.params.arguments));
});
</script></body>"""


async def record_of(probe_rt: Runtime, request_id: str) -> approvals.ApprovalRecord:
    async with probe_rt.db.read() as tx:
        return await approvals.get(tx, request_id)


def card_uri(result: CallToolResult) -> str:
    assert result.is_error and result.meta is not None
    uri = result.meta["ui"]["resourceUri"]
    assert isinstance(uri, str) and uri == result.meta["ui/resourceUri"]
    return uri


async def card_of(client: Client, uri: str) -> str:
    [contents] = (await client.read_resource(uri)).contents
    assert isinstance(contents, TextResourceContents) and contents.mime_type == APP_MIME_TYPE
    return contents.text


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_paused_call_offers_its_card_only_to_an_apps_host(probe_rt: Runtime, mode: str) -> None:
    async with Client(build_server(probe_rt, transport="memory"), mode=mode) as plain:
        assert CARD_TOOL not in [t.name for t in (await plain.list_tools()).tools]
        result = await plain.call_tool("probe_danger", {"label": "plain"})
        assert "needs a person's approval" in error_text(result) and "ui" not in (result.meta or {})
        refused = await plain.call_tool(CARD_TOOL, {"requestId": "x", "token": "y", "decision": "approve"})
        assert "Unknown tool" in error_text(refused) or "unknown" in error_text(refused).lower()
    async with Client(build_server(probe_rt, transport="memory"), mode=mode, extensions=[APPS]) as host:
        [card_tool] = [t for t in (await host.list_tools()).tools if t.name == CARD_TOOL]
        assert card_tool.meta == {"ui": {"visibility": ["app"]}}  # never shown to the model
        result = await host.call_tool("probe_danger", {"label": "card", "count": 3})
        uri = card_uri(result)
        html = await card_of(host, uri)
        record = await record_of(probe_rt, uri.rsplit("/", 1)[1])
        assert f'<pre id="action">{escape(record.question)}</pre>' in html  # the question whole, as text
        assert "This adds 3 row(s) labelled &#x27;card&#x27;" in html and "<script>" in html
        assert "default-src 'none'" in html and " src=" not in html


async def test_the_cards_answer_is_bound_to_its_request_and_session_and_taken_once(probe_rt: Runtime) -> None:
    server = build_server(probe_rt, transport="memory")
    async with Client(server, extensions=[APPS]) as host, Client(server, extensions=[APPS]) as other:
        first = card_uri(await host.call_tool("probe_danger", {"label": "first"}))
        second = card_uri(await host.call_tool("probe_danger", {"label": "second"}))
        first_id, second_id = first.rsplit("/", 1)[1], second.rsplit("/", 1)[1]
        token = (await card_of(host, first)).split('data-token="')[1].split('"')[0]
        with pytest.raises(MCPError, match="No approval card"):  # another session's connection sees no card
            await other.read_resource(first)
        answer = {"requestId": first_id, "token": token, "decision": "approve"}
        elsewhere = await other.call_tool(CARD_TOOL, answer)
        assert elsewhere.is_error and "not for this request" in error_text(elsewhere)
        swapped = await host.call_tool(CARD_TOOL, answer | {"requestId": second_id})
        assert swapped.is_error and "not for this request" in error_text(swapped)
        bad = await host.call_tool(CARD_TOOL, answer | {"decision": "yes please"})
        assert bad.is_error
        taken = await host.call_tool(CARD_TOOL, answer)
        assert not taken.is_error and "Approved probe_danger" in str(taken.content[0])
        again = await host.call_tool(CARD_TOOL, answer | {"decision": "deny"})
        assert again.is_error and "an answer works once" in error_text(again)
        ran = await host.call_tool("probe_danger", {"label": "first"})
        assert data(ran) == {"rows": 1}
        assert "approved" in await card_of(host, first) or "consumed" in await card_of(host, first)
    assert (await record_of(probe_rt, first_id)).decided_by == "card"
    assert (await record_of(probe_rt, second_id)).status == "pending"


@browser_test
async def test_the_card_in_chromium_shows_the_exact_command_and_answers_once(
    probe_rt: Runtime, browser: Any, workspace: Path
) -> None:
    (workspace / "build").mkdir()
    async with Client(build_server(probe_rt, transport="memory"), extensions=[APPS]) as client:
        paused = await client.call_tool("shell_run", {"command": COMMAND})
        uri = card_uri(paused)
        record = await record_of(probe_rt, uri.rsplit("/", 1)[1])
        html = await card_of(client, uri)
        tab = await browser.new_page(viewport={"width": 800, "height": 460})
        problems: list[str] = []
        tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)

        async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, arguments)
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        await tab.expose_function("callTool", call_tool)
        await tab.set_content(HOST)
        await tab.evaluate("(html) => window.show(html)", html)
        card = tab.frame_locator("#card")
        shown = await card.locator("#action").inner_text()
        assert shown == record.question and COMMAND in shown and "/workspace" in shown  # exactly what runs
        if folder := os.environ.get("MANAGED_TOOLS_SCREENSHOTS"):
            (TESTS.parent / folder).mkdir(parents=True, exist_ok=True)
            await tab.locator("#card").screenshot(path=str(TESTS.parent / folder / "approval-card.png"))
        await card.locator("#approve").click()
        await card.locator("#outcome.ok").wait_for()
        assert "Approved shell_run" in await card.locator("#outcome").inner_text()
        assert (await record_of(probe_rt, record.id)).decided_by == "card"
        # The same card again (a stale copy, its token already used): refused, and nothing changes.
        await tab.evaluate("(html) => window.show(html)", html)
        await tab.frame_locator("#card").locator("#deny").click()
        await tab.frame_locator("#card").locator("#outcome.bad").wait_for()
        assert "an answer works once" in await tab.frame_locator("#card").locator("#outcome").inner_text()
        handshake = ["ui/initialize", "ui/notifications/initialized"]
        assert await tab.evaluate("window.seen") == [*handshake, "tools/call"] * 2
        assert problems == []  # the card's own CSP allowed its script and style
        again = await client.call_tool("shell_run", {"command": COMMAND})
    assert not again.is_error and not (workspace / "build").exists()  # approved once: it ran once, as shown
    assert (await record_of(probe_rt, record.id)).status == "consumed"
