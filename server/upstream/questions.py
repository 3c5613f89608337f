"""An upstream server's question (elicitation) asked of the person whose call it is answering, through our own
channels; never through our approvals: its answer goes back to that upstream and approves nothing of ours.

The upstream asks on its own connection, which carries no link to the call that made it ask; the call registers
its asker for as long as it waits on the upstream (`Upstream._call`), and the question goes to the one caller
waiting on that upstream, or to the latest one of a single session. Callers of several sessions waiting at once:
nobody can tell whose person it is for, so it is declined.

How the person sees it, in the order tried:
- a form question, to a handshake-era client that shows forms: `elicitation/create` in form mode, the message
  saying which upstream asks;
- otherwise (a URL question, a client without forms, a 2026-07-28 client that cannot be asked mid-call): a
  one-time loopback page (server/pages/) saying which upstream asks and showing its address or its form, offered
  by URL-mode elicitation where the client takes it, else in a progress notification on the call;
- no page server, or no answer in time: the upstream hears `cancel`.
A URL that is not http(s), and a form that is not flat primitives, are declined without asking anyone.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from managed_tools.server.consent.board import PageAnswer, Pages, PagesFull
from managed_tools.server.consent.consent import form_schema
from managed_tools.stores.events import append_event
from managed_tools.tools.framework.calls.arguments import clip
from managed_tools.tools.framework.context.context import Attachment, Runtime
from managed_tools.tools.framework.context.what_runs import visible

log = logging.getLogger("managed_tools.upstream")
MAX_MESSAGE_CHARS = 2000
MAX_URL_CHARS = 4096
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
DECLINE = types.ElicitResult(action="decline")
CANCEL = types.ElicitResult(action="cancel")


class Questions:
    """The person behind one of our `tools/call`s, as an upstream's question reaches them (built per call, as
    `CallConsent` is)."""

    def __init__(
        self,
        runtime: Runtime,
        attachment: Attachment,
        ctx: ServerRequestContext[Any],
        *,
        pages: Pages | None,
        wait_seconds: float,
    ) -> None:
        self._runtime = runtime
        self.attachment = attachment
        self._ctx = ctx
        self._pages = pages
        self._wait = wait_seconds

    async def ask(self, upstream: str, params: types.ElicitRequestParams) -> types.ElicitResult:
        mode = "url" if isinstance(params, types.ElicitRequestURLParams) else "form"
        answer = await self._ask(upstream, params)
        async with self._runtime.db.write() as tx:  # the audit: who asked, how, and the answer's kind (not its values)
            payload = {"upstream": upstream, "mode": mode, "action": answer.action}
            await append_event(tx, self.attachment.session_id, self.attachment.wake_id, "upstream.question", payload,
                               summary=f"{upstream} asked ({mode}): {answer.action}.")  # fmt: skip
        return answer

    async def _ask(self, upstream: str, params: types.ElicitRequestParams) -> types.ElicitResult:
        message = f"The upstream server '{upstream}' asks: {clean(params.message)}"
        link: str | None = None
        form: dict[str, Any] | None = None
        if isinstance(params, types.ElicitRequestURLParams):
            link = web_address(params.url)
            if link is None:
                log.warning("upstream %s asked to open an address that is not http(s); declined", upstream)
                return DECLINE
        else:
            form = form_schema(dict(params.requested_schema))
            if form is None:
                log.warning("upstream %s asked with a form that is not flat primitives; declined", upstream)
                return DECLINE
        session = self._ctx.session
        caps = session.client_capabilities
        modes = caps.elicitation if caps is not None else None
        pushed = self._ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and session.can_send_request
        if form is not None and pushed and modes is not None and (modes.form is not None or modes.url is None):
            with anyio.move_on_after(self._wait):
                try:
                    return await session.elicit_form(
                        message, requested_schema=form, related_request_id=self._ctx.request_id
                    )
                except Exception as exc:  # a client that cannot show it: the upstream hears a no
                    log.warning("forwarding %s's question failed: %s", upstream, type(exc).__name__)
                    return DECLINE
            return CANCEL
        return await self._on_page(
            upstream, message, link, form, url_mode=pushed and modes is not None and modes.url is not None
        )

    async def _on_page(
        self, upstream: str, message: str, link: str | None, form: dict[str, Any] | None, *, url_mode: bool
    ) -> types.ElicitResult:
        if self._pages is None:
            return CANCEL
        try:
            page = self._pages.open_question(owner=self.attachment.owner, session_id=self.attachment.session_id,
                                             upstream=upstream, message=message, link=link, form=form)  # fmt: skip
        except PagesFull as exc:
            log.warning("upstream %s's question not asked: %s", upstream, exc)
            return CANCEL
        offer = f"The upstream server '{upstream}' has a question for you: open the one-time page to answer it."
        url = self._pages.url(page)
        try:
            with anyio.move_on_after(self._wait):
                if url_mode:
                    opened = await self._ctx.session.elicit_url(
                        offer, url, page.elicitation_id, related_request_id=self._ctx.request_id
                    )
                    if opened.action != "accept":
                        return DECLINE
                else:
                    await self._ctx.session.report_progress(0, None, f"{offer} {url}")
                return _reply(await self._pages.wait(page, self._wait))
        finally:
            self._pages.close(page)
        return CANCEL


def _reply(answer: PageAnswer | None) -> types.ElicitResult:
    if answer is None:
        return CANCEL
    return types.ElicitResult(action="accept", content=answer.content) if answer.approve else DECLINE


def clean(text: str) -> str:
    """An upstream's words, shown to a person as our own questions show model text (`visible`: control, format
    and bidi characters spelled out, runs of spaces and line breaks counted, each line indented under the label),
    bounded; leading blanks dropped, so its first visible character sits on the label's line."""
    return visible(clip(text.lstrip(), MAX_MESSAGE_CHARS), "    ")


def web_address(url: str) -> str | None:
    """`url` if it is an http(s) address with a host, and nothing a page could misread; else None."""
    if len(url) > MAX_URL_CHARS or CONTROL.search(url) or any(c.isspace() for c in url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme.lower() in ("http", "https") and parts.hostname else None


# The asker of the `tools/call` now running in this task (set by server/mcp/app.py around the executor), so the
# upstream that call reaches knows whom its questions are for.
asking: ContextVar[Questions | None] = ContextVar("managed_tools_upstream_asking", default=None)


@contextmanager
def asking_for(questions: Questions) -> Iterator[None]:
    """`questions` is who the upstreams this task reaches ask, for the block."""
    token = asking.set(questions)
    try:
        yield
    finally:
        asking.reset(token)


def addressee(waiting: list[Questions]) -> Questions | None:
    """Whose person an upstream's question is for: the one caller waiting, or the latest of a single session."""
    if not waiting:
        return None
    sessions = {(q.attachment.owner, q.attachment.session_id) for q in waiting}
    return waiting[-1] if len(sessions) == 1 else None
