"""Approval cards inside the client: for a host that renders MCP Apps (`io.modelcontextprotocol/ui`), a paused
call's result also points at a `ui://` view of the permission question, showing exactly what runs (the command,
cwd, environment, a write's diff: the question's own text), with Approve / Deny.

The decision stays on the server's side. The card answers by calling `approval_card_answer` through the host (an
app-only tool: `_meta.ui.visibility` ["app"], listed only to clients that negotiated Apps) with the answer token
the card was given, bound to its request and session and taken once (server/consent/bound_answers.py), as the
dashboard's is. A card is offered only where the client may relay the person's answer at all: not to an OAuth principal
without the approvals scope, and not under `approvals: "page"` (which keeps every answer off the client).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Awaitable, Callable
from html import escape
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.apps import APP_MIME_TYPE, client_supports_apps
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from managed_tools.server.auth.principal import current_principal
from managed_tools.server.connection.attach import Attachments
from managed_tools.server.consent.bound_answers import BoundAnswers, Decision
from managed_tools.server.consent.human import question
from managed_tools.server.publishing.publish import Reply, WireResult, to_wire_result
from managed_tools.stores import approvals
from managed_tools.stores.approvals import ApprovalRecord
from managed_tools.stores.db import Database
from managed_tools.stores.errors import NotFoundError
from managed_tools.tools.framework.calls.call_result import CallResult

CARD_TOOL = "approval_card_answer"
CallTool = Callable[
    [ServerRequestContext[Attachments], types.CallToolRequestParams],
    Awaitable[Reply],
]
ReadResource = Callable[
    [ServerRequestContext[Attachments], types.ReadResourceRequestParams], Awaitable[types.ReadResourceResult]
]
URI_PREFIX = "ui://managed-tools/approval/"
RESOURCE_NOT_FOUND = -32002
LEGACY_URI_KEY = "ui/resourceUri"  # the result key hosts read before `_meta.ui.resourceUri`


class CardAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    request_id: str = Field(max_length=64)
    token: str = Field(max_length=128)
    decision: Decision


CARD_TOOL_DEFINITION = types.Tool(
    name=CARD_TOOL,
    title="Answer an approval card",
    description="Used by the approval card a person sees in the client; not for the model.",
    input_schema=CardAnswer.model_json_schema(by_alias=True),
    annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    _meta={"ui": {"visibility": ["app"]}},
)


class ApprovalCards:
    """The cards of one server process: their answer key lives as long as it does. `page_only` is config
    `approvals: "page"`, under which no card is offered."""

    def __init__(self, db: Database, *, page_only: bool = False) -> None:
        self._db = db
        self._page_only = page_only
        self._answers = BoundAnswers("card")

    @staticmethod
    def shown_by(ctx: ServerRequestContext[Any]) -> bool:
        return client_supports_apps(ctx)

    def listed(self, ctx: ServerRequestContext[Any], tools: list[types.Tool]) -> list[types.Tool]:
        """tools/list: the card's answer tool is there for a client that negotiated Apps (a connection's list
        depends on what it negotiated, never on what it asked before)."""
        return [*tools, CARD_TOOL_DEFINITION] if self.shown_by(ctx) else tools

    def reply(self, ctx: ServerRequestContext[Any], result: CallResult) -> WireResult:
        """The call's result, pointing the host at its request's card when the call waits for a person and this
        client may relay that person's answer."""
        reply = to_wire_result(result)
        request_id = (result.action_required or {}).get("requestId")
        offered = self.shown_by(ctx) and current_principal().answers_approvals and not self._page_only
        if result.error_kind != "permission" or not isinstance(request_id, str) or not offered:
            return reply
        uri = URI_PREFIX + request_id
        return {**reply, "_meta": {**reply.get("_meta", {}), "ui": {"resourceUri": uri}, LEGACY_URI_KEY: uri}}

    def in_front_of_calls(self, call_tool: CallTool) -> CallTool:
        """The tools/call handler: the card's answer here (from a client that may answer), any other call on."""

        async def call(ctx: ServerRequestContext[Attachments], params: types.CallToolRequestParams) -> Reply:
            if params.name == CARD_TOOL and self.shown_by(ctx) and current_principal().answers_approvals:
                return await self.answer(params.arguments, (await ctx.lifespan_context.resolve(ctx)).session_id)
            return await call_tool(ctx, params)

        return call

    def in_front_of(self, read_resource: ReadResource) -> ReadResource:
        """The resources/read handler: a card's URI here, any other to `read_resource`."""

        async def read(
            ctx: ServerRequestContext[Attachments], params: types.ReadResourceRequestParams
        ) -> types.ReadResourceResult:
            if params.uri.startswith(URI_PREFIX):
                return await self.read(params.uri, (await ctx.lifespan_context.resolve(ctx)).session_id)
            return await read_resource(ctx, params)

        return read

    async def read(self, uri: str, session_id: str) -> types.ReadResourceResult:
        """The card of a request of this session (no other session's card exists for this connection)."""
        async with self._db.read() as tx:
            try:
                record = await approvals.get(tx, uri.removeprefix(URI_PREFIX))
            except NotFoundError:
                record = None
        if record is None or record.session_id != session_id:
            raise MCPError(code=RESOURCE_NOT_FOUND, message=f"No approval card {uri}.")
        answerable = record.status == "pending" and record.kind == "tool_confirmation"
        html = document(record, self._answers.token(record) if answerable else None)
        contents = types.TextResourceContents(uri=uri, mime_type=APP_MIME_TYPE, text=html)
        return types.ReadResourceResult(contents=[contents])

    async def answer(self, arguments: dict[str, Any] | None, session_id: str) -> WireResult:
        try:
            given = CardAnswer.model_validate(arguments or {})
        except ValidationError:
            return _result("The card's answer names a request, its token and approve, approve-session or deny.", False)
        async with self._db.write() as tx:
            answered = await self._answers.answer(
                tx, given.request_id, given.token, given.decision, session_id=session_id
            )
        then = " It runs when the model calls it again with the same arguments." if given.decision != "deny" else ""
        return _result(answered.message + (then if answered.ok else ""), answered.ok)


def _result(text: str, ok: bool) -> WireResult:
    return {"content": [{"type": "text", "text": text}], "isError": not ok, "resultType": "complete"}


CSS = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:0;padding:.7rem;color:#16181d}h1{font-size:1rem;margin:0 0 .4rem}"
    "pre{white-space:pre-wrap;word-break:break-all;background:#f3f4f6;border:1px solid #d6d9de;padding:.5rem;"
    "font:12.5px/1.4 ui-monospace,monospace;max-height:24rem;overflow:auto}"
    "button{font:inherit;padding:.3rem .9rem;margin:.2rem .4rem .2rem 0;cursor:pointer}"
    ".muted{color:#667}.ok{color:#1a7f37}.bad{color:#b42318}"
)
SCRIPT = """
"use strict";
const card = document.body.dataset;
let next = 1;
const waiting = new Map();
function rpc(method, params) {
  const id = next++;
  window.parent.postMessage({jsonrpc: "2.0", id: id, method: method, params: params}, "*");
  return new Promise((resolve, reject) => waiting.set(id, {resolve: resolve, reject: reject}));
}
window.addEventListener("message", (event) => {
  const m = event.data;
  if (event.source !== window.parent || !m || m.jsonrpc !== "2.0" || !waiting.has(m.id)) return;
  const w = waiting.get(m.id);
  waiting.delete(m.id);
  if (m.error) w.reject(new Error(m.error.message)); else w.resolve(m.result);
});
const ready = rpc("ui/initialize", {appInfo: {name: "managed-tools approval card", version: "1"},
  appCapabilities: {}, protocolVersion: "2026-01-26"})
  .then(() => window.parent.postMessage({jsonrpc: "2.0", method: "ui/notifications/initialized", params: {}}, "*"));
const outcome = document.getElementById("outcome");
const buttons = Array.from(document.querySelectorAll("button[data-decision]"));
async function answer(decision) {
  buttons.forEach((b) => { b.disabled = true; });
  try {
    await ready;
    const result = await rpc("tools/call", {name: card.tool,
      arguments: {requestId: card.request, token: card.token, decision: decision}});
    outcome.textContent = (result.content || []).map((c) => c.text || "").join(" ");
    outcome.className = result.isError ? "bad" : "ok";
  } catch (error) {
    outcome.textContent = "The host did not pass the answer on: " + error.message;
    outcome.className = "bad";
    buttons.forEach((b) => { b.disabled = false; });
  }
}
buttons.forEach((b) => b.addEventListener("click", () => answer(b.dataset.decision)));
"""


def _hash(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


# The host sandboxes the card; its own policy says the same again: nothing loaded, only its script and style.
CSP = f"default-src 'none'; script-src 'sha256-{_hash(SCRIPT)}'; style-src 'sha256-{_hash(CSS)}'; base-uri 'none'"


def document(record: ApprovalRecord, token: str | None) -> str:
    """The card: the question whole, as text, and the buttons when it can still be answered here."""
    if token is None:
        state = f"This request is {record.status}." if record.status != "pending" else "Answer it in a terminal."
        choices = f'<p id="outcome" class="muted">{escape(state)}</p>'
    else:
        choices = (
            '<button data-decision="approve" id="approve">Approve once</button>'
            '<button data-decision="approve-session" id="approve-session">Approve for this session</button>'
            '<button data-decision="deny" id="deny">Deny</button><p id="outcome" class="muted"></p>'
        )
    data = f'data-tool="{CARD_TOOL}" data-request="{escape(record.id)}" data-token="{escape(token or "")}"'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>Approve {escape(record.tool_name)}?</title><style>{CSS}</style></head>"
        f"<body {data}><h1>Approve <code>{escape(record.tool_name)}</code>?</h1>"
        '<p class="muted">The call is paused. It runs only if you approve exactly this:</p>'
        f'<pre id="action">{escape(question(record))}</pre>{choices}<script>{SCRIPT}</script></body></html>'
    )
