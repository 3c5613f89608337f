"""The approval and secret pages: URL-mode elicitation from a real MCP client (both eras, in process and over
stdio), answered in a real headless Chromium on the real loopback server, and the attacks a page must resist
(reuse, foreign origins, DNS rebinding, expiry, one request's token against another)."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
import uvicorn
from conftest import CHROMIUM, data, error_text
from mcp import Client, StdioServerParameters
from mcp.client import ClientRequestContext
from mcp.server import Server, ServerRequestContext
from pydantic import SecretStr
from starlette.types import Receive, Scope, Send

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.consent.board import Page, PageAnswer, Pages
from managed_tools.server.consent.secret_input import PageSecretInput
from managed_tools.server.mcp.app import build_server
from managed_tools.server.pages.serving import serving_pages
from managed_tools.stores import approvals
from managed_tools.stores.sessions import LOCAL_OWNER
from managed_tools.tools.framework.context.context import Attachment, Runtime
from managed_tools.tools.framework.context.ports import VariableAnswer, VariableRequest

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parents[2]
SECRET = "sk-test-5f0c1d2e-never-in-a-log"
ElicitFn = Callable[[ClientRequestContext, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


def _browser_missing() -> str | None:
    if os.environ.get("CI") == "true":
        return None  # CI installs both (.ci/run): a missing browser fails there
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        return "Debian's chromium is not installed here (apt-get install -y chromium); CI=true runs these tests"
    if importlib.util.find_spec("playwright") is None:
        return "python playwright is not installed here (pip install -e '.[test]'); CI=true runs these tests"
    return None


browser_test = pytest.mark.skipif(_browser_missing() is not None, reason=_browser_missing() or "")


@pytest.fixture
def config(probe_config: ServeConfig) -> ServeConfig:
    return probe_config


@pytest.fixture
def rt(probe_rt: Runtime) -> Runtime:
    return probe_rt


@pytest.fixture
async def pages() -> AsyncIterator[Pages]:
    async with serving_pages(Pages(for_approvals=True)) as served:
        yield served


async def rows(rt: Runtime) -> int:
    async with rt.db.read() as tx:
        exists = await tx.scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'probe'")
        return int(await tx.scalar("SELECT COUNT(*) FROM probe")) if exists else 0


async def requests_of(rt: Runtime) -> list[approvals.ApprovalRecord]:
    async with rt.db.read() as tx:
        return [approvals._record(r) for r in await tx.fetchall("SELECT * FROM approvals ORDER BY requested_at")]


class Person:
    """The client's side: the URL-mode elicitations it received, and how it answers them (accept at once, as a
    real client does after opening the browser, or decline / cancel)."""

    def __init__(self, action: str = "accept") -> None:
        self.action = action
        self.send, self.urls = anyio.create_memory_object_stream[types.ElicitRequestURLParams](10)

    async def __call__(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams), "a page question must travel in URL mode"
        await self.send.send(params)
        return types.ElicitResult(action=self.action)


async def in_browser(
    browser: Any, url: str, click: str, fill: str | None = None, screenshot: str | None = None
) -> dict[str, str]:
    """Open the page, read what it shows, answer it; returns the texts shown and the outcome heading. With
    MANAGED_TOOLS_SCREENSHOTS=DIR set (relative to the repository), the page as a person first sees it is saved as
    DIR/`screenshot`: the README's picture of an approval is `MANAGED_TOOLS_SCREENSHOTS=docs/images`."""
    page = await browser.new_page(viewport={"width": 900, "height": 400})
    try:
        response = await page.goto(url)
        assert response is not None and response.status == 200
        if screenshot is not None and (folder := os.environ.get("MANAGED_TOOLS_SCREENSHOTS")):
            (TESTS.parent / folder).mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(TESTS.parent / folder / screenshot), full_page=True)
        shown = {
            name: await page.inner_text(f"#{name}")
            for name in ("action", "name", "description")
            if await page.query_selector(f"#{name}") is not None
        }
        if fill is not None:
            await page.fill("#value", fill)
        await page.click(click)
        await page.wait_for_selector("#outcome")
        shown["outcome"] = await page.inner_text("#outcome")
        shown["html"] = await page.content()
        again = await page.goto(url)
        assert again is not None
        shown["again"] = f"{again.status} {await page.inner_text('#outcome')}"
        return shown
    finally:
        await page.close()


# ---- permission pauses by page ------------------------------------------------------------------------------


@browser_test
@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize(
    "choice", [("#approve", "Approved"), ("#approve-session", "Approved for this session"), ("#deny", "Denied")]
)
async def test_approval_on_the_page(
    rt: Runtime, pages: Pages, browser: Any, mode: str, choice: tuple[str, str]
) -> None:
    button, expected = choice
    person = Person()
    server = build_server(rt, transport="memory", approval_wait_seconds=30, pages=pages)
    seen: dict[str, str] = {}
    async with Client(server, mode=mode, elicitation_callback=person) as client, anyio.create_task_group() as tg:

        async def the_person() -> None:
            params = await person.urls.receive()
            assert params.url.startswith(pages.origin + "/p/")
            seen.update(await in_browser(browser, params.url, button))

        tg.start_soon(the_person)
        result = await client.call_tool("probe_danger", {"label": "by page", "count": 2})
    [record] = await requests_of(rt)
    assert seen["action"] == record.question  # exactly what a form would have shown
    assert "probe_danger" in seen["action"] and "This adds 2 row(s) labelled 'by page'" in seen["action"]
    assert seen["outcome"] == expected and seen["again"] == "410 Already answered"
    if expected.startswith("Approved"):
        assert data(result) == {"rows": 2} and record.status == "consumed"
        assert record.remember == ("session" if button == "#approve-session" else "once")
    else:
        assert "denied" in error_text(result) and await rows(rt) == 0 and record.status == "denied"


@browser_test
async def test_a_shell_command_on_the_page_runs_only_when_approved(
    rt: Runtime, pages: Pages, browser: Any, workspace: Path
) -> None:
    """What the README shows: the page names the command and its cwd whole, and a denied command leaves the
    workspace as it was."""
    (workspace / "build").mkdir()
    person = Person()
    server = build_server(rt, transport="memory", approval_wait_seconds=30, pages=pages)
    seen: dict[str, str] = {}
    async with Client(server, elicitation_callback=person) as client, anyio.create_task_group() as tg:

        async def the_person() -> None:
            params = await person.urls.receive()
            seen.update(await in_browser(browser, params.url, "#deny", screenshot="approval-page.png"))

        tg.start_soon(the_person)
        result = await client.call_tool("shell_run", {"command": "rm -rf build && python -m pytest -q"})
    assert "rm -rf build && python -m pytest -q" in seen["action"] and "/workspace" in seen["action"]
    assert seen["outcome"] == "Denied" and "denied" in error_text(result)
    assert (workspace / "build").is_dir()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_client_that_will_not_open_the_page_is_a_no(rt: Runtime, pages: Pages, mode: str, action: str) -> None:
    person = Person(action)
    server = build_server(rt, transport="memory", approval_wait_seconds=30, pages=pages)
    async with Client(server, mode=mode, elicitation_callback=person) as client:
        result = await client.call_tool("probe_danger", {"label": "no"})
    params = person.urls.receive_nowait()
    assert "denied" in error_text(result) and await rows(rt) == 0
    [record] = await requests_of(rt)
    assert record.status == "denied"
    async with httpx2.AsyncClient() as http:  # the page died with its request
        assert (await http.get(params.url)).status_code == 410


async def test_forms_still_ask_unless_the_config_says_page(rt: Runtime) -> None:
    """A client with forms keeps the form by default; the page is for URL-only clients or `approvals: page`."""
    async with serving_pages(Pages()) as default_pages:
        server = build_server(rt, transport="memory", approval_wait_seconds=5, pages=default_pages)

        async def form(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
            assert isinstance(params, types.ElicitRequestFormParams)
            return types.ElicitResult(action="accept", content={"approve": True})

        async with Client(server, mode="legacy", elicitation_callback=form) as client:
            assert data(await client.call_tool("probe_danger", {"label": "form"})) == {"rows": 1}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_clients_accept_alone_never_approves(rt: Runtime, pages: Pages, mode: str) -> None:
    """A client that answers the URL question with a form's yes, without the page being answered: no."""

    async def forger(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": True})

    server = build_server(rt, transport="memory", approval_wait_seconds=0.5, pages=pages)
    async with Client(server, mode=mode, elicitation_callback=forger) as client:
        result = await client.call_tool("probe_danger", {"label": "forged"})
    assert "no answer" in error_text(result) and await rows(rt) == 0


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_over_stdio_the_page_is_served_too(config: ServeConfig, mode: str) -> None:
    """`managed-tools serve` (stdio) runs the page server in its own event loop; config `approvals: page`."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    (config.data_dir / "config.json").write_text('{"approvals": "page"}', encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    args = [
        "-m",
        "managed_tools.server",
        "serve",
        "--workspace",
        str(config.workspace),
        "--tools-module",
        "support.probe_tools",
    ]
    person = Person()
    params = StdioServerParameters(command=sys.executable, args=[*args, "--data-dir", str(config.data_dir)], env=env)
    async with Client(params, mode=mode, elicitation_callback=person) as client, anyio.create_task_group() as tg:

        async def the_person() -> None:
            question = await person.urls.receive()
            async with httpx2.AsyncClient() as http:
                shown = await http.get(question.url)
                assert "probe_danger" in shown.text and "stdio" in shown.text
                csrf = shown.text.split('name="csrf" value="')[1].split('"')[0]
                origin = question.url.split("/p/")[0]
                answered = await http.post(
                    question.url, data={"csrf": csrf, "decision": "approve"}, headers={"Origin": origin}
                )
                assert answered.status_code == 200

        tg.start_soon(the_person)
        assert data(await client.call_tool("probe_danger", {"label": "stdio"})) == {"rows": 1}


# ---- secrets by page ------------------------------------------------------------------------------------------

NEED = VariableRequest(
    tool_name="needs_key", name="API_KEY", type="secret", description="The <b>API</b> key for example.com & co."
)


def secret_server(pages: Pages, delivered: list[VariableAnswer]) -> Server[Any]:
    """A server whose one tool asks for a secret through `PageSecretInput`, as the vault's resolution does."""

    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="needs_key", input_schema={"type": "object"})])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        attachment = Attachment(session_id="session-1", wake_id="wake-1", transport="memory", owner="")
        asker = PageSecretInput(pages, ctx, params, attachment, wait_seconds=30)
        answer = await asker.ask(NEED)
        if asker.input_required is not None:
            return asker.input_required
        delivered.append(answer)
        text = f"{answer.status}: {answer.note or ''}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("secret-probe", on_list_tools=list_tools, on_call_tool=call_tool)


@browser_test
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_secret_entered_on_the_page_reaches_the_caller_and_no_log(
    pages: Pages, browser: Any, mode: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    person, delivered = Person(), list[VariableAnswer]()
    seen: dict[str, str] = {}
    async with (
        Client(secret_server(pages, delivered), mode=mode, elicitation_callback=person) as client,
        anyio.create_task_group() as tg,
    ):

        async def the_person() -> None:
            params = await person.urls.receive()
            assert "API_KEY" in params.message and SECRET not in params.message
            seen.update(await in_browser(browser, params.url, "#provide", fill=SECRET))

        tg.start_soon(the_person)
        result = await client.call_tool("needs_key", {})
    [answer] = delivered
    assert answer.status == "provided" and answer.value is not None and answer.value.get_secret_value() == SECRET
    assert seen["name"] == "API_KEY" and seen["description"] == NEED.description  # escaped, shown as text
    assert seen["outcome"] == "Received" and seen["again"] == "410 Already answered"
    assert SECRET not in seen["html"] and SECRET not in str(result) and SECRET not in repr(answer)
    out, err = capfd.readouterr()
    assert SECRET not in caplog.text + out + err


@browser_test
async def test_a_declined_secret(pages: Pages, browser: Any) -> None:
    person, delivered = Person(), list[VariableAnswer]()
    async with (
        Client(secret_server(pages, delivered), mode="legacy", elicitation_callback=person) as client,
        anyio.create_task_group() as tg,
    ):

        async def the_person() -> None:
            await in_browser(browser, (await person.urls.receive()).url, "#decline")

        tg.start_soon(the_person)
        await client.call_tool("needs_key", {})
    assert [a.status for a in delivered] == ["declined"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_secret_without_url_elicitation_names_the_command(pages: Pages, mode: str) -> None:
    delivered: list[VariableAnswer] = []
    async with Client(secret_server(pages, delivered), mode=mode) as client:
        result = await client.call_tool("needs_key", {})
    assert [a.status for a in delivered] == ["unavailable"]
    assert "`managed-tools secret set API_KEY`" in str(result.content[0])


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_declining_the_secret_page(pages: Pages, mode: str) -> None:
    delivered: list[VariableAnswer] = []
    async with Client(secret_server(pages, delivered), mode=mode, elicitation_callback=Person("decline")) as client:
        await client.call_tool("needs_key", {})
    assert [a.status for a in delivered] == ["declined"]


# ---- attacks ---------------------------------------------------------------------------------------------------


def open_approval(pages: Pages, request_id: str = "request-1") -> Page:
    return pages.open_approval(
        owner=LOCAL_OWNER, session_id="s", request_id=request_id, tool_name="t", message="rm -rf /tmp/x"
    )


async def post(http: httpx2.AsyncClient, pages: Pages, page: Page, **overrides: Any) -> httpx2.Response:
    form = {"csrf": page.csrf, "decision": "approve"} | overrides.pop("form", {})
    headers = {"Origin": pages.origin} | overrides.pop("headers", {})
    return await http.post(pages.url(page), data=form, headers=headers, **overrides)


async def test_headers_of_every_page(pages: Pages) -> None:
    page = open_approval(pages)
    async with httpx2.AsyncClient() as http:
        for response in (await http.get(pages.url(page)), await http.get(pages.origin + "/p/nothing")):
            csp = response.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "form-action 'self'" in csp and "frame-ancestors 'none'" in csp
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["referrer-policy"] == "no-referrer"
            assert response.headers["cache-control"] == "no-store"
            assert "access-control-allow-origin" not in response.headers
            assert "<script" not in response.text and "http" not in response.text.split("<body>")[1]


async def test_the_page_server_starts_with_the_first_page_and_a_visit_before_it_waits() -> None:
    """uvicorn starts when a page is opened (most servers never open one); the port listens from the start, so a
    visit that comes sooner waits in the queue and is answered once it does."""
    async with serving_pages(Pages()) as board:
        async with httpx2.AsyncClient(timeout=10) as http, anyio.create_task_group() as tasks:
            answered: list[int] = []

            async def visit() -> None:
                answered.append((await http.get(board.origin + "/p/nothing")).status_code)

            tasks.start_soon(visit)
            await anyio.sleep(0.5)
            assert answered == []  # nothing serves yet
            open_approval(board)
        assert answered == [404]


async def test_a_page_answers_once(pages: Pages) -> None:
    page = open_approval(pages)
    async with httpx2.AsyncClient() as http:
        assert (await post(http, pages, page)).status_code == 200
        again = await post(http, pages, page, form={"decision": "deny"})
        assert again.status_code == 410 and "Already answered" in again.text
    assert page.answer is not None and page.answer.approve  # the second answer changed nothing


async def test_foreign_origins_and_missing_csrf_are_refused(pages: Pages) -> None:
    page = open_approval(pages)
    other = "http://127.0.0.1:1"
    async with httpx2.AsyncClient() as http:
        assert (await post(http, pages, page, headers={"Origin": other})).status_code == 403
        assert (await post(http, pages, page, headers={"Origin": "null"})).status_code == 403
        assert (await http.post(pages.url(page), data={"csrf": page.csrf, "decision": "approve"})).status_code == 403
        for site in ("same-site", "cross-site", "none"):
            for origin in (pages.origin, "null"):
                headers = {"Sec-Fetch-Site": site, "Origin": origin}
                assert (await post(http, pages, page, headers=headers)).status_code == 403
        foreign_but_same = {"Sec-Fetch-Site": "same-origin", "Origin": other}
        assert (await post(http, pages, page, headers=foreign_but_same)).status_code == 403
        assert (await post(http, pages, page, form={"csrf": "guess"})).status_code == 403
        as_json = await http.post(pages.url(page), json={"decision": "approve"}, headers={"Origin": pages.origin})
        assert as_json.status_code == 415
    assert page.state == "open" and page.answer is None


async def test_dns_rebinding_is_refused(pages: Pages) -> None:
    page = open_approval(pages)
    port = pages.authority.split(":")[1]
    async with httpx2.AsyncClient() as http:
        for host in (f"evil.example:{port}", f"localhost:{port}", "127.0.0.1", f"127.0.0.1:{port}.evil.example"):
            got = await http.get(pages.url(page), headers={"Host": host})
            assert got.status_code == 421, host
            assert page.csrf not in got.text
            refused = await post(http, pages, page, headers={"Host": host})
            assert refused.status_code == 421
    assert page.state == "open"


async def test_an_expired_page_takes_no_answer() -> None:
    async with serving_pages(Pages(ttl_seconds=0.3)) as short:
        page = open_approval(short)
        await anyio.sleep(0.4)
        async with httpx2.AsyncClient() as http:
            shown = await http.get(short.url(page))
            assert shown.status_code == 410 and "Expired" in shown.text and page.csrf not in shown.text
            assert (await post(http, short, page)).status_code == 410
        assert page.answer is None and await short.wait(page, 1) is None


async def test_one_requests_token_cannot_answer_another(pages: Pages) -> None:
    first, second = open_approval(pages, "request-1"), open_approval(pages, "request-2")
    async with httpx2.AsyncClient() as http:
        assert (await post(http, pages, first, form={"csrf": second.csrf})).status_code == 403
        assert (await http.get(pages.origin + "/p/" + "A" * 43)).status_code == 404
        assert (await post(http, pages, second)).status_code == 200
    assert first.state == "open" and second.answer is not None
    assert pages.find("approval", "s", "request-1") is first
    assert pages.find("approval", "other-session", "request-1") is None  # bound to its session too


@asynccontextmanager
async def foreign_site(target: str, fields: dict[str, str] | None = None) -> AsyncIterator[str]:
    """Another page on localhost (another port, so another origin) that tries to read and answer `target`, with a
    form of `fields` (by default an approval with a guessed CSRF token)."""
    inputs = "".join(
        f'<input name="{name}" value="{value}">'
        for name, value in (fields or {"decision": "approve", "csrf": "guess"}).items()
    )
    body = f"""<!doctype html><title>evil</title><form id="f" method="post" action="{target}">
{inputs}</form><script>
fetch("{target}").then(r => r.text()).then(t => document.title = "read " + t.length)
  .catch(e => document.title = "blocked " + e.name);
fetch("{target}", {{method: "POST", mode: "no-cors", body: new URLSearchParams({{decision: "approve"}})}});
</script>""".encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
            await send({"type": "http.response.body", "body": body})

    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            try:
                yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
            finally:
                server.should_exit = True


@browser_test
async def test_a_page_of_another_origin_can_neither_read_nor_answer(pages: Pages, browser: Any) -> None:
    page = open_approval(pages)
    async with foreign_site(pages.url(page)) as evil:
        tab = await browser.new_page()
        await tab.goto(evil)
        await tab.wait_for_function("document.title.startsWith('blocked') || document.title.startsWith('read')")
        assert await tab.title() == "blocked TypeError"
        await tab.evaluate("document.getElementById('f').submit()")
        await tab.wait_for_selector("#outcome")
        assert await tab.inner_text("#outcome") == "Refused"
        await tab.close()
    assert page.state == "open" and page.answer is None  # the real person can still answer it


async def test_a_secret_nobody_picked_up_is_dropped_at_expiry() -> None:
    board = Pages(ttl_seconds=0.2)
    page = board.open_secret(owner=LOCAL_OWNER, session_id="s", tool_name="t", name="API_KEY", description="d")
    assert board.answer(page, PageAnswer(approve=True, value=SecretStr(SECRET)))
    assert board.find("secret", "s", "t/API_KEY") is page  # a 2026 retry would pick it up now
    await anyio.sleep(0.3)
    assert board.find("secret", "s", "t/API_KEY") is None and page.answer is None


async def test_no_log_line_carries_a_page_url_token(pages: Pages, caplog: pytest.LogCaptureFixture) -> None:
    """A page's URL answers its question: at DEBUG every library logs (httpx2 logs each request's URL), and none
    of those lines may carry the token."""
    caplog.set_level(logging.DEBUG)
    page = pages.open_approval(
        owner=LOCAL_OWNER, session_id="s", request_id="r", tool_name="probe", message="May it run?"
    )
    async with httpx2.AsyncClient() as http:
        seen = await http.get(pages.url(page))
    logging.getLogger("managed_tools.probe").warning("opened %s", pages.url(page))
    assert seen.status_code == 200
    assert "/p/" in caplog.text and page.token not in caplog.text
