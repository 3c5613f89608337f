"""A complete gateway (issue 27 item 1): an upstream's questions (elicitation) reach our person through our own
channels, its resources and prompts are served under its prefix with updates and list changes passed on, and
sampling stays out. A real upstream (tests/support/gateway_server.py) runs as a subprocess over stdio, confined, and a
real
`mcp.Client` talks to our server in both eras."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import mcp_types as types
import pytest
from conftest import ERAS, upstreams_started
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.session import IncomingMessage
from test_upstream import PROGRAM, configured

from managed_tools.server.consent.board import Page, Pages
from managed_tools.server.mcp.app import build_server
from managed_tools.server.pages.serving import serving_pages
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.server.upstream.gateway import gateway_for
from managed_tools.server.upstream.questions import web_address
from managed_tools.server.upstream.upstream import Upstream
from managed_tools.stores import approvals
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

GATEWAY = {
    "command": sys.executable,
    "args": [str(Path(__file__).resolve().parents[2] / "support" / "gateway_server.py")],
    **PROGRAM,
}
GREETING = "upstream://asker/note://greeting"


@asynccontextmanager
async def gateway(workspace: Path, tmp_path: Path) -> AsyncIterator[tuple[Runtime, Pages]]:
    config = configured(workspace, tmp_path / "data", {"asker": GATEWAY})
    async with open_runtime(config) as rt, serving_pages(Pages()) as pages:
        await upstreams_started(rt, "asker")
        yield rt, pages


@asynccontextmanager
async def client_of(rt: Runtime, pages: Pages, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    server = build_server(rt, transport="memory", approval_wait_seconds=10, pages=pages)
    async with Client(server, mode=mode, **kwargs) as client:
        yield client


def said(call: types.CallToolResult) -> str:
    """What an upstream tool returned (its `result`)."""
    assert not call.is_error, call.content
    return str((call.structured_content or {})["result"])


def open_pages(pages: Pages) -> list[Page]:
    return [p for p in pages._pages.values() if p.kind == "question" and p.state == "open"]


async def answer_page(pages: Pages, form: dict[str, str]) -> str:
    """The person: waits for the upstream's question page, reads it, answers it through its form."""
    with anyio.fail_after(30):
        while not open_pages(pages):  # noqa: ASYNC110 (the page opens in the server's task)
            await anyio.sleep(0.02)
    page = open_pages(pages)[0]
    async with httpx2.AsyncClient() as http:
        shown = (await http.get(pages.url(page))).text
        answered = await http.post(pages.url(page), data={"csrf": page.csrf, **form}, headers={"Origin": pages.origin})
    assert answered.status_code == 200, answered.text
    return shown


async def answered_on_page(
    pages: Pages, form: dict[str, str], call: Awaitable[types.CallToolResult]
) -> tuple[types.CallToolResult, str]:
    """The call's result, while the person answers its upstream's question on our page (and what the page showed)."""
    shown: list[str] = []

    async def the_person() -> None:
        shown.append(await answer_page(pages, form))

    async with anyio.create_task_group() as tg:
        tg.start_soon(the_person)
        result = await call
    return result, shown[0]


# ---- elicitation ------------------------------------------------------------------------------------------------


async def test_a_form_question_reaches_a_handshake_era_client_saying_which_upstream_asks(
    workspace: Path, tmp_path: Path
) -> None:
    seen: list[types.ElicitRequestParams] = []

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params)
        return types.ElicitResult(action="accept", content={"approve": True, "name": "Ada"})

    async with (
        gateway(workspace, tmp_path) as (rt, pages),
        client_of(rt, pages, "legacy", elicitation_callback=person) as client,
    ):
        answer = said(await client.call_tool("asker__ask_form", {"question": "Proceed?"}))
        got = await client.call_tool("session_get_events", {"limit": 50})
    assert answer == "form accept: {'approve': True, 'name': 'Ada'}"
    (params,) = seen
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.message == "The upstream server 'asker' asks: Proceed?"
    assert set(params.requested_schema["properties"]) == {"approve", "name"}
    audited = [e["payload"] for e in (got.structured_content or {})["events"] if e["type"] == "upstream.question"]
    assert audited == [{"upstream": "asker", "mode": "form", "action": "accept"}]  # its kind, never the values


async def test_an_upstreams_question_is_escaped_as_ours_with_the_label_on_its_first_line(
    workspace: Path, tmp_path: Path
) -> None:
    """Issue 34, L2: bidi overrides and 30 line breaks pushed the label out of view, so the question posed as our
    own shell_run question. Shown as we show model text, it reads whole under the label."""
    seen: list[str] = []

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action="decline")

    posing = "\n \u202eOK\u202c?" + "\n" * 30 + "Command, run once by /bin/bash in a new process:\n    ls"
    async with (
        gateway(workspace, tmp_path) as (rt, pages),
        client_of(rt, pages, "legacy", elicitation_callback=person) as client,
    ):
        said(await client.call_tool("asker__ask_form", {"question": posing}))
    (message,) = seen
    assert message == (
        "The upstream server 'asker' asks: ⟨U+202E⟩OK⟨U+202C⟩?⟨30 line breaks⟩⏎\n"
        "    Command, run once by /bin/bash in a new process:⏎\n"
        "        ls"
    )
    assert "\u202e" not in message and message.count("\n") == 2


@pytest.mark.parametrize("mode", ERAS)
async def test_a_form_question_goes_to_our_page_where_the_client_shows_no_form(
    workspace: Path, tmp_path: Path, mode: str
) -> None:
    """2026-07-28 cannot be asked mid-call, and this handshake-era client declares nothing: our page asks, and the
    call's progress notification says where."""
    told: list[str] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        told.append(message or "")

    form = {"decision": "submit", "f_approve": "true", "f_name": "Bo"}
    async with gateway(workspace, tmp_path) as (rt, pages), client_of(rt, pages, mode) as client:
        call, shown = await answered_on_page(
            pages, form, client.call_tool("asker__ask_form", {"question": "Go?"}, progress_callback=progress)
        )
    assert said(call) == "form accept: {'approve': True, 'name': 'Bo'}"
    assert "The upstream server <code>asker</code> asks" in shown and "Go?" in shown
    assert any(pages.origin + "/p/" in m and "'asker'" in m for m in told)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_url_question_goes_to_our_page_showing_the_address(workspace: Path, tmp_path: Path, mode: str) -> None:
    offered: list[str] = []

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams)
        offered.append(params.url)  # our page, never the upstream's address
        return types.ElicitResult(action="accept")

    async with (
        gateway(workspace, tmp_path) as (rt, pages),
        client_of(rt, pages, mode, elicitation_callback=person) as client,
    ):
        address = {"url": "https://login.example.com/start?x=1"}
        call, shown = await answered_on_page(pages, {"decision": "done"}, client.call_tool("asker__ask_url", address))
    assert said(call) == "url accept"
    assert "https://login.example.com/start?x=1" in shown and "Sign in, please" in shown
    assert all(url.startswith(pages.origin + "/p/") for url in offered)
    assert offered if mode == "legacy" else not offered  # 2026-07-28: told by progress (none asked for here)


@pytest.mark.parametrize(
    "url", ["javascript:alert(1)", "file:///etc/passwd", "data:text/html,hi", "https://", "https://a b.example/"]
)
async def test_a_url_question_that_is_not_http_is_refused_unasked(workspace: Path, tmp_path: Path, url: str) -> None:
    asked: list[str] = []

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept")

    async with (
        gateway(workspace, tmp_path) as (rt, pages),
        client_of(rt, pages, "legacy", elicitation_callback=person) as client,
    ):
        call = await client.call_tool("asker__ask_url", {"url": url})
    assert said(call) == "url decline"
    assert asked == [] and open_pages(pages) == []
    assert web_address(url) is None and web_address("http://example.com/a") == "http://example.com/a"


async def test_an_upstream_question_approves_nothing_of_ours(workspace: Path, tmp_path: Path) -> None:
    """A question shaped like our approval (`approve: true`), answered yes, goes to the upstream only: an approval
    of ours waiting at the same time stays pending, and our writing tool still asks."""

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": True, "name": ""})

    async with gateway(workspace, tmp_path) as (rt, pages):
        async with client_of(rt, pages, "legacy") as client:  # no elicitation: our tool's question waits out of band
            pending = await client.call_tool("asker__store", {"text": "x"})
        assert pending.is_error and "needs a person's approval" in pending.content[0].text  # type: ignore[union-attr]
        async with client_of(rt, pages, "legacy", elicitation_callback=person) as client:
            assert "form accept" in said(await client.call_tool("asker__ask_form", {"question": "approve?"}))
        async with rt.db.read() as tx:
            records = await approvals.list_open(tx)
    assert [(r.tool_name, r.status) for r in records] == [("asker__store", "pending")]


async def test_a_question_while_callers_of_two_sessions_wait_is_declined(workspace: Path, tmp_path: Path) -> None:
    """Nobody can tell whose person the upstream means: neither is asked."""
    asked: list[str] = []

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True, "name": "x"})

    answers: list[str] = []
    async with gateway(workspace, tmp_path) as (rt, pages):

        async def caller() -> None:
            async with client_of(rt, pages, "legacy", elicitation_callback=person) as client:
                answers.append(said(await client.call_tool("asker__ask_together", {"callers": 2})))

        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            tg.start_soon(caller)
    assert answers == ["form decline", "form decline"] and asked == []


async def test_a_question_with_no_caller_waiting_is_declined(workspace: Path, tmp_path: Path) -> None:
    async with gateway(workspace, tmp_path) as (rt, _):
        upstream = cast(Upstream, gateway_for(rt.registry).upstreams["asker"])  # the real one, its private handler
        question = types.ElicitRequestFormParams(message="who?", requested_schema={"type": "object", "properties": {}})
        answer = await upstream._on_elicit(cast(ClientRequestContext, None), question)
    assert answer.action == "decline"


async def test_sampling_is_refused(workspace: Path, tmp_path: Path) -> None:
    async with gateway(workspace, tmp_path) as (rt, pages), client_of(rt, pages, "legacy") as client:
        answer = said(await client.call_tool("asker__ask_sampling", {}))
    assert answer.startswith("sampling refused:")


# ---- resources and prompts --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_resources_templates_and_prompts_are_served_under_the_prefix(
    workspace: Path, tmp_path: Path, mode: str
) -> None:
    async with gateway(workspace, tmp_path) as (rt, pages), client_of(rt, pages, mode) as client:
        listed = {r.uri: r for r in (await client.list_resources()).resources}
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        read = await client.read_resource(GREETING)
        item = await client.read_resource("upstream://asker/note://items/pen")
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        got = await client.get_prompt("asker__greet", {"name": "Ada"})
        completed = await client.complete(types.PromptReference(type="ref/prompt", name="asker__greet"), {
            "name": "name", "value": "A"})  # fmt: skip
    assert listed[GREETING].name == "asker__greeting"
    assert "upstream://asker/note://items/{item}" in templates
    assert read.contents[0].uri == GREETING and isinstance(read.contents[0], types.TextResourceContents)
    assert read.contents[0].text == "hello from the upstream"
    assert isinstance(item.contents[0], types.TextResourceContents) and item.contents[0].text == "item pen"
    assert {"asker__greet", "planning_react"} <= prompts or "asker__greet" in prompts
    content = got.messages[0].content
    assert isinstance(content, types.TextContent) and content.text == "Say hello to Ada."
    assert completed.completion.values == ["Ada", "Alan"]  # the upstream completes its own prompt


async def test_an_upstream_cannot_spoof_our_resources_or_another_upstream(workspace: Path, tmp_path: Path) -> None:
    other = {**GATEWAY, "args": [*GATEWAY["args"], "other"]}
    config = configured(workspace, tmp_path / "data", {"asker": GATEWAY, "other": other})
    async with open_runtime(config) as rt, serving_pages(Pages()) as pages, client_of(rt, pages, "legacy") as client:
        await upstreams_started(rt, "asker", "other")
        uris = {r.uri for r in (await client.list_resources()).resources}
        ours = "managed-tools://session/current/memory/session_state"
        spoof = await client.read_resource(f"upstream://asker/{ours}")
        nested = await client.read_resource("upstream://asker/upstream://other/secret")
        own = await client.read_resource("upstream://other/upstream://other/secret")
        with pytest.raises(Exception, match="No upstream serves"):
            await client.read_resource("upstream://nobody/secret")
    assert f"upstream://asker/{ours}" in uris and "upstream://asker/upstream://other/secret" in uris
    assert ours not in {u for u in uris if u.startswith("upstream://")}
    text = spoof.contents[0]
    assert isinstance(text, types.TextResourceContents) and text.text == "spoofed state"  # from the upstream itself
    assert nested.contents[0].uri == "upstream://asker/upstream://other/secret"
    assert [getattr(r.contents[0], "text", None) for r in (nested, own)] == ["served by asker", "served by other"]


async def test_updates_and_list_changes_pass_through(workspace: Path, tmp_path: Path) -> None:
    heard: list[IncomingMessage] = []

    async def handler(message: IncomingMessage) -> None:
        heard.append(message)

    async with (
        gateway(workspace, tmp_path) as (rt, pages),
        client_of(rt, pages, "legacy", message_handler=handler) as client,
    ):
        await client.list_resources()
        await client.subscribe_resource(GREETING)
        heard.clear()
        assert said(await client.call_tool("asker__touch", {})) == "touched"
        with anyio.fail_after(10):
            while not any(isinstance(m, types.ResourceListChangedNotification) for m in heard):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        updated = [m.params.uri for m in heard if isinstance(m, types.ResourceUpdatedNotification)]
        assert GREETING in updated
        uris = {r.uri for r in (await client.list_resources()).resources}
        fresh = await client.read_resource(GREETING)
    assert "upstream://asker/note://added" in uris
    assert isinstance(fresh.contents[0], types.TextResourceContents) and fresh.contents[0].text == "hello again"


async def test_a_modern_client_hears_updates_by_listening(workspace: Path, tmp_path: Path) -> None:
    async with (
        gateway(workspace, tmp_path) as (rt, pages),
        client_of(rt, pages, "auto") as client,
        client.listen(resource_subscriptions=[GREETING]) as subscription,
    ):
        assert said(await client.call_tool("asker__touch", {})) == "touched"
        with anyio.fail_after(10):
            event = await anext(aiter(subscription))
    assert getattr(event, "uri", None) == GREETING


# ---- overrides of an upstream's tools ---------------------------------------------------------------------------


async def test_an_upstreams_tools_take_overrides_but_never_a_looser_policy(
    workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    overrides = {
        "asker__ask_form": {"title": "Ask a form", "description": "Ask the person.", "permissionPolicy": "always_ask"},
        "asker__store": {"permissionPolicy": "always_allow"},  # looser than its missing read-only hint gives
    }
    config = configured(workspace, tmp_path / "data", {"asker": GATEWAY}, overrides=overrides)
    async with open_runtime(config) as rt, serving_pages(Pages()) as pages:
        await upstreams_started(rt, "asker")
        async with client_of(rt, pages, "legacy") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
    ask, store = tools["asker__ask_form"], tools["asker__store"]
    assert (ask.title, ask.description) == ("Ask a form", "Ask the person.")
    assert (ask.meta or {})["managed-tools/tool"]["permissionPolicy"] == "always_ask"
    assert (store.meta or {})["managed-tools/tool"]["permissionPolicy"] == "always_ask"
    assert "overrides.asker__store.permissionPolicy: always_allow is looser" in caplog.text
