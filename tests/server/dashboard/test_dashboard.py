"""The live dashboard: `managed-tools dashboard` run as its own process on the state a server (this test's
runtime, a real MCP client calling it) writes, opened in a real headless Chromium. It renders, follows the
events live, answers a paused call, and refuses a foreign origin, a reused answer and a wrong address.

With MANAGED_TOOLS_SCREENSHOTS=docs/images the tests save docs/images/dashboard.png (a call waiting for its
approval) and docs/images/dashboard-live.png (after a few calls)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from conftest import data, error_text
from mcp import Client
from mcp.client import ClientRequestContext
from test_pages import browser_test, foreign_site

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.stores import approvals
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parents[2]
URL_SAID = re.compile(r"managed-tools: dashboard at (http://127\.0\.0\.1:\d+/d/[A-Za-z0-9_-]{43}/)")
URL = re.compile(r"managed-tools dashboard: (http://127\.0\.0\.1:\d+/d/[A-Za-z0-9_-]{43}/)")


@pytest.fixture
def dashboard(probe_rt: Runtime, probe_config: ServeConfig) -> Iterator[str]:
    """`managed-tools dashboard` in its own process, on the runtime's state; its URL."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    args = ["--workspace", str(probe_config.workspace), "--data-dir", str(probe_config.data_dir)]
    command = [sys.executable, "-m", "managed_tools.server", "dashboard", *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            found = URL.search(line)
            assert found, (line, process.stderr.read() if process.stderr else "")
            yield found.group(1)
        finally:
            process.terminate()
            assert process.wait(10) == 0  # SIGTERM stops it cleanly


async def opened(browser: Any, url: str) -> Any:
    tab = await browser.new_page(viewport={"width": 1200, "height": 900})
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.problems = problems
    response = await tab.goto(url)
    assert response is not None and response.status == 200
    await tab.wait_for_selector("body[data-ready='1']")
    await tab.wait_for_selector("#live.on")
    return tab


async def screenshot(tab: Any, name: str) -> None:
    if folder := os.environ.get("MANAGED_TOOLS_SCREENSHOTS"):
        (TESTS.parent / folder).mkdir(parents=True, exist_ok=True)
        await tab.screenshot(path=str(TESTS.parent / folder / name), full_page=True)


async def requests_of(probe_rt: Runtime) -> list[approvals.ApprovalRecord]:
    async with probe_rt.db.read() as tx:
        return [approvals._record(r) for r in await tx.fetchall("SELECT * FROM approvals ORDER BY requested_at")]


class Unanswered:
    """A client that shows the permission form and whose person answers elsewhere: it never returns."""

    async def __call__(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


@browser_test
async def test_it_renders_and_follows_the_calls_live(probe_rt: Runtime, dashboard: str, browser: Any) -> None:
    tab = await opened(browser, dashboard)
    assert await tab.inner_text("#approvals") == "No call is waiting for a person."
    async with Client(build_server(probe_rt, transport="memory")) as client:
        await client.call_tool("probe_plain", {"label": "live", "count": 1})
        await tab.wait_for_selector("#events li:has-text('probe_plain: success')", timeout=10_000)
        first = "first line\nsecond line"
        await client.call_tool("memory_write", {"target": "working_buffer", "content": first})
        second = data(
            await client.call_tool("memory_write", {"target": "working_buffer", "content": first + "\nthird line"})
        )
        # The newest version is the second write (the new agent's substrate files came first). The page may show
        # the first write's row on top before the second's arrives: wait for the second's own size.
        newest = f"#versions tr:first-child:has-text('working_buffer'):has-text('{second['sizeBytes']} B') button"
        await tab.wait_for_selector(newest, timeout=10_000)
    await tab.click(newest)
    await tab.wait_for_selector("#diff:has-text('+third line')")  # (the page's CSP forbids evaluated strings)
    assert "-first line" not in await tab.inner_text("#diff")  # the newest version's own change only
    sessions = await tab.inner_text("#sessions")
    assert "memory (" in sessions or "memory since" in sessions or "last ended" in sessions
    await screenshot(tab, "dashboard-live.png")
    assert tab.problems == []  # no CSP violation, no script error


@browser_test
async def test_approving_on_the_dashboard_unblocks_a_paused_call(
    probe_rt: Runtime, dashboard: str, browser: Any
) -> None:
    """A handshake-era client asked its person, who answers at the dashboard (another process) instead."""
    tab = await opened(browser, dashboard)
    server = build_server(probe_rt, transport="memory", approval_wait_seconds=60)
    result: list[types.CallToolResult] = []
    returned = anyio.Event()
    async with (
        Client(server, mode="legacy", elicitation_callback=Unanswered()) as client,
        anyio.create_task_group() as tg,
    ):

        async def call() -> None:
            result.append(await client.call_tool("probe_danger", {"label": "from the dashboard", "count": 2}))
            returned.set()

        tg.start_soon(call)
        await tab.wait_for_selector(".card", timeout=10_000)
        [record] = await requests_of(probe_rt)
        assert await tab.inner_text(".card pre.what") == record.question  # exactly what runs
        assert "This adds 2 row(s) labelled 'from the dashboard'" in record.question
        await screenshot(tab, "dashboard.png")
        await tab.click(".card button[data-decision='approve']")
        with anyio.fail_after(10):  # the client's own question is still open: the dashboard's answer ends it
            await returned.wait()
    assert data(result[0]) == {"rows": 2}
    [record] = await requests_of(probe_rt)
    assert record.status == "consumed" and record.decided_by == "dashboard"
    await tab.wait_for_selector("#approvals .empty")


@browser_test
async def test_a_client_without_elicitation_retries_after_the_dashboard_approves(
    probe_rt: Runtime, dashboard: str, browser: Any
) -> None:
    tab = await opened(browser, dashboard)
    async with Client(build_server(probe_rt, transport="memory")) as client:
        waiting = await client.call_tool("probe_danger", {"label": "later"})
        assert "needs a person's approval" in error_text(waiting)
        await tab.wait_for_selector(".card")
        await tab.click(".card button[data-decision='deny']")
        await tab.wait_for_selector("#answered:has-text('Denied probe_danger')")
        await tab.wait_for_selector("#approvals .empty")
        again = await client.call_tool("probe_danger", {"label": "later"})  # a new request: denial is final
        await tab.wait_for_selector(".card")
        await tab.click(".card button[data-decision='approve']")
        await tab.wait_for_selector("#answered:has-text('Approved probe_danger')")
        ran = await client.call_tool("probe_danger", {"label": "later"})
    assert "needs a person's approval" in error_text(again) and data(ran) == {"rows": 1}


@browser_test
async def test_a_foreign_origin_and_a_reused_answer_are_refused(
    probe_rt: Runtime, dashboard: str, browser: Any
) -> None:
    tab = await opened(browser, dashboard)
    async with Client(build_server(probe_rt, transport="memory")) as client:
        await client.call_tool("probe_danger", {"label": "guarded"})
    await tab.wait_for_selector(".card")
    state = await tab.evaluate("fetch('state').then(r => r.json())")
    [shown] = state["approvals"]
    csrf = await tab.evaluate("document.body.dataset.csrf")
    answer_url = dashboard + "answer"
    # Another site on this machine, even one that learnt every token, cannot answer: the browser says it is
    # cross-site, and no script can say otherwise.
    fields = {"csrf": csrf, "request": shown["id"], "token": shown["answerToken"], "decision": "approve"}
    async with foreign_site(answer_url, fields) as evil:
        other = await browser.new_page()
        await other.goto(evil)
        await other.wait_for_function("document.title.startsWith('blocked') || document.title.startsWith('read')")
        assert await other.title() == "blocked TypeError"  # it cannot read the dashboard either
        async with other.expect_navigation() as navigated:
            await other.evaluate("document.getElementById('f').submit()")
        refused = await navigated.value
        assert refused.status == 403 and "only from the page itself" in await refused.text()
    [record] = await requests_of(probe_rt)
    assert record.status == "pending"
    await tab.click(".card button[data-decision='approve']")
    await tab.wait_for_selector("#answered:has-text('Approved probe_danger')")
    replay = await tab.evaluate(
        "(f) => fetch('answer', {method: 'POST', body: new URLSearchParams(f)})"
        ".then(async r => [r.status, (await r.json()).message])",
        fields | {"decision": "deny"},
    )
    assert replay[0] == 410 and "an answer works once" in replay[1]
    [record] = await requests_of(probe_rt)
    assert record.status == "approved" and record.decided_by == "dashboard"
    assert [p for p in tab.problems if "410 (Gone)" not in p] == []  # the refused replay's, and no CSP violation


async def test_the_address_the_tokens_and_the_headers(probe_rt: Runtime, dashboard: str) -> None:
    """Without a browser: a wrong Host (DNS rebinding), a wrong dashboard token, a missing CSRF token, another
    request's answer token, and the strict headers on everything."""
    async with Client(build_server(probe_rt, transport="memory")) as client:
        for label in ("one", "two"):
            await client.call_tool("probe_danger", {"label": label})
    origin = dashboard.split("/d/", maxsplit=1)[0]
    port = origin.rsplit(":", maxsplit=1)[1]
    async with httpx2.AsyncClient() as http:
        page = await http.get(dashboard)
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert " src=" not in page.text and " href=" not in page.text  # nothing loaded from anywhere
        assert set(re.findall(r"https?://[^\s\"']+", page.text)) == {"http://www.w3.org/2000/svg"}  # a namespace
        assert (await http.get(dashboard, headers={"Host": f"localhost:{port}"})).status_code == 421
        assert (await http.get(origin + "/d/" + "A" * 43 + "/state")).status_code == 404
        state = (await http.get(dashboard + "state")).json()
        one, two = state["approvals"]
        csrf = page.text.split('data-csrf="')[1].split('"')[0]
        post = {"csrf": csrf, "request": one["id"], "token": two["answerToken"], "decision": "approve"}
        headers = {"Origin": origin}
        assert (await http.post(dashboard + "answer", data=post, headers=headers)).status_code == 403
        no_csrf = post | {"csrf": "guess", "token": one["answerToken"]}
        assert (await http.post(dashboard + "answer", data=no_csrf, headers=headers)).status_code == 403
        as_json = await http.post(dashboard + "answer", json=post | {"token": one["answerToken"]}, headers=headers)
        assert as_json.status_code == 415
        right = await http.post(dashboard + "answer", data=post | {"token": one["answerToken"]}, headers=headers)
        assert right.status_code == 200
        assert "access-control-allow-origin" not in right.headers
        bad_version = await http.get(dashboard + "diff", params={"store": "memory", "id": "../../etc"})
        assert bad_version.status_code == 400
    statuses = {r.id: r.status for r in await requests_of(probe_rt)}
    assert statuses == {one["id"]: "approved", two["id"]: "pending"}


async def test_the_event_stream_resumes_after_the_last_event_it_sent(probe_rt: Runtime, dashboard: str) -> None:
    async with Client(build_server(probe_rt, transport="memory")) as client:
        await client.call_tool("probe_plain", {"label": "before"})
    async with httpx2.AsyncClient() as http:
        state = (await http.get(dashboard + "state")).json()
        last = state["lastSeq"]
        async with Client(build_server(probe_rt, transport="memory")) as client:
            await client.call_tool("probe_plain", {"label": "after"})
        seen: list[str] = []
        with anyio.fail_after(10):
            async with http.stream("GET", dashboard + "stream", headers={"Last-Event-ID": str(last)}) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                async for line in stream.aiter_lines():
                    seen.append(line)
                    if "probe_plain: success" in line:
                        break
    ids = [int(line[4:]) for line in seen if line.startswith("id: ")]
    assert ids and min(ids) == last + 1  # nothing before the resume point, nothing skipped


def test_serve_on_a_terminal_prints_the_dashboards_link(probe_config: ServeConfig) -> None:
    """`serve` whose stderr is a terminal serves the dashboard beside its pages and says where; started by a client
    (stderr a pipe to its log), it prints no link."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    args = ["--workspace", str(probe_config.workspace), "--data-dir", str(probe_config.data_dir)]
    command = [sys.executable, "-m", "managed_tools.server", "serve", *args]
    terminal, its_end = pty.openpty()
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=its_end, env=env) as served:
        os.close(its_end)
        said = b""
        while (found := URL_SAID.search(said.decode(errors="replace"))) is None:
            ready, _, _ = select.select([terminal], [], [], 20)
            assert ready, said
            said += os.read(terminal, 4096)
        page = httpx2.get(found.group(1))
        assert page.status_code == 200 and "managed-tools dashboard" in page.text
        assert served.stdin is not None
        served.stdin.close()  # the client goes: the server ends
        assert served.wait(20) == 0
    os.close(terminal)
    piped = subprocess.run(command, input=b"", capture_output=True, env=env, timeout=60, check=True)
    assert b"dashboard at" not in piped.stderr


class HeldOpen:
    """A client's approval form left open until `close` is set; then its person closes it without answering."""

    def __init__(self) -> None:
        self.shown, self.close = anyio.Event(), anyio.Event()

    async def __call__(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.shown.set()
        await self.close.wait()
        return types.ElicitResult(action="cancel")


async def left_behind(probe_rt: Runtime) -> None:
    """A request whose client asked (no form of its own) and then went away: nobody waits for its answer now."""
    async with Client(build_server(probe_rt, transport="memory")) as client:
        assert "needs a person's approval" in error_text(await client.call_tool("probe_danger", {"label": "orphan"}))


@browser_test
async def test_the_waiting_list_puts_a_waiting_client_first_and_marks_the_orphan_last(
    probe_rt: Runtime, dashboard: str, browser: Any, tmp_path: Path
) -> None:
    await left_behind(probe_rt)  # asked first: the oldest
    server = build_server(probe_rt, transport="memory", approval_wait_seconds=60)
    async with (
        Client(server, mode="legacy", elicitation_callback=Unanswered()) as client,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(client.call_tool, "probe_danger", {"label": "live one", "count": 1})
        tab = await opened(browser, dashboard)
        await tab.wait_for_selector(".card:nth-child(2)", timeout=10_000)
        cards = await tab.query_selector_all(".card")
        marks = [await card.get_attribute("data-attached") for card in cards]
        assert marks == ["1", "0"]  # the one a client waits for first, the orphan last
        assert "client waiting" in await cards[0].inner_text() and "live one" in await cards[0].inner_text()
        orphan = await cards[1].inner_text()
        assert "client left" in orphan and "sees the answer only if it comes back" in orphan
        assert "1 with a client waiting, 1 whose client left" in await tab.inner_text("#waiting")
        for width in (1280, 390):
            await tab.set_viewport_size({"width": width, "height": 900})
            await tab.screenshot(path=str(tmp_path / f"dashboard-{width}.png"), full_page=True)
            await screenshot(tab, f"dashboard-{width}.png")
            # Nothing wider than the window at phone width: columns collapse, words wrap at their ends.
            assert await tab.evaluate("document.documentElement.scrollWidth") <= width
        held = await tab.inner_text("#held")
        assert "probe_danger" in held and "probe_danger" not in await tab.inner_text("#refusals")
        tg.cancel_scope.cancel()
    assert tab.problems == []


@browser_test
async def test_idle_sessions_wait_behind_a_filter(probe_rt: Runtime, dashboard: str, browser: Any) -> None:
    async with Client(build_server(probe_rt, transport="memory")) as client:
        await client.call_tool("probe_plain", {"label": "done", "count": 1})  # then it leaves: an idle session
    tab = await opened(browser, dashboard)
    assert "No session is active now" in await tab.inner_text("#sessions")
    assert "idle hidden" in await tab.inner_text("#idle-count")
    await tab.check("#show-idle")
    await tab.wait_for_selector("#sessions table")


@browser_test
async def test_a_dashboard_approval_releases_a_2026_client_whose_own_form_is_open(
    probe_rt: Runtime, dashboard: str, browser: Any
) -> None:
    """2026-07-28: the call answered the client with its question (input required); the client holds its form
    open. The dashboard's approval is the decision: when the form closes, whatever it says, the retry runs."""
    tab = await opened(browser, dashboard)
    form = HeldOpen()
    result: list[types.CallToolResult] = []

    async def call(client: Client) -> None:
        result.append(await client.call_tool("probe_danger", {"label": "modern", "count": 3}))

    async with (
        Client(build_server(probe_rt, transport="memory"), elicitation_callback=form) as client,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(call, client)
        with anyio.fail_after(10):
            await form.shown.wait()
        await tab.wait_for_selector(".card[data-attached='1']", timeout=10_000)
        assert "own form is open" in await tab.inner_text(".card")
        await tab.click(".card button[data-decision='approve']")
        await tab.wait_for_selector("#answered:has-text('Approved probe_danger')")
        form.close.set()  # the person closes the client's form: the dashboard already answered
    assert data(result[0]) == {"rows": 3}
    [record] = await requests_of(probe_rt)
    assert record.status == "consumed" and record.decided_by == "dashboard"
