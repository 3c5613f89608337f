"""The pages open now: each a random token (256 bits) bound to one request of one session, answered once, and
forgotten some time after it expires. Everything is in memory: a page outlives neither its wait nor the server."""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from pydantic import SecretStr
from starlette.types import ASGIApp

from managed_tools.server.auth.fair_share import share_of
from managed_tools.tools.framework.wire.redaction import KNOWN

Kind = Literal["approval", "secret", "question"]  # question: an upstream server's, forwarded (upstream/questions.py)
State = Literal["open", "answered", "closed"]
PAGE_TTL_SECONDS = 600.0  # a page not answered within ten minutes is dead
FORGET_AFTER_SECONDS = 600.0  # then, for as long again, a visit says it expired rather than "not found"
MAX_PAGES = 1024  # open and remembered pages, a quarter of them per principal (server/auth/fair_share.py)

# A page's URL is a capability (whoever opens it answers): no log line carries one, whichever library logs it.
PAGE_URL_TOKEN = re.compile(r"(?<=/[pd]/)[A-Za-z0-9_-]{43}")  # a page's, or the dashboard's (/d/)


@dataclass(frozen=True)
class PageAnswer:
    """Approve (True) or deny / decline (False); for a secret, `value` when the person entered one; for an
    approval, `remember` session when the person approved this exact call for the rest of the session."""

    approve: bool
    value: SecretStr | None = None
    remember: Literal["once", "session"] = "once"
    content: dict[str, str | int | float | bool] | None = None  # a question's form, as the person filled it


@dataclass(eq=False)
class Page:
    kind: Kind
    owner: str  # the principal whose call asked (server/auth/principal.py)
    session_id: str  # the durable session whose call asked
    request_key: str  # the approval request id, or the tool and variable name of a secret
    tool_name: str
    text: str  # the exact action (approval) or the variable's description (secret)
    variable: str | None
    expires_at: float  # time.monotonic()
    link: str | None = None  # a question's address to open (http or https only)
    form: dict[str, Any] | None = None  # a question's flat form schema (consent.form_schema)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    elicitation_id: str = field(default_factory=lambda: secrets.token_hex(16))
    state: State = "open"
    answer: PageAnswer | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    def expired(self) -> bool:
        return time.monotonic() >= self.expires_at

    @property
    def live(self) -> bool:
        """Still waiting for its person: never forgotten to make room."""
        return self.state == "open" and not self.expired()


class PagesFull(Exception):
    """A principal has as many live pages as its share allows (or the board is full of live pages)."""


class Pages:
    """The board of pages, and where they are served (`origin`, once `serving.py` has bound its port).

    `for_approvals` (config `approvals: "page"`) sends every permission question to a page; otherwise only a
    client that can open a URL but cannot show a form gets one."""

    def __init__(
        self, *, for_approvals: bool = False, ttl_seconds: float = PAGE_TTL_SECONDS, capacity: int = MAX_PAGES
    ) -> None:
        self.for_approvals = for_approvals
        self._ttl = ttl_seconds
        self._capacity = capacity
        self._pages: dict[str, Page] = {}
        self.authority = ""  # "127.0.0.1:PORT": the only Host the site answers
        self.dashboard: ASGIApp | None = None  # served under /d/ when set (server/dashboard/)
        self.wanted: anyio.Event | None = None  # set by the page server (serving.py): serve once a page is open
        KNOWN.hide_in_logs(PAGE_URL_TOKEN)

    @property
    def origin(self) -> str:
        return f"http://{self.authority}"

    def url(self, page: Page) -> str:
        return f"{self.origin}/p/{page.token}"

    def open_approval(self, *, owner: str, session_id: str, request_id: str, tool_name: str, message: str) -> Page:
        """A new page; PagesFull when `owner` already has its share of live pages."""
        return self._open(Page("approval", owner, session_id, request_id, tool_name, message, None, self._expiry()))

    def open_secret(self, *, owner: str, session_id: str, tool_name: str, name: str, description: str) -> Page:
        key = secret_key(tool_name, name)
        return self._open(Page("secret", owner, session_id, key, tool_name, description, name, self._expiry()))

    def open_question(
        self,
        *,
        owner: str,
        session_id: str,
        upstream: str,
        message: str,
        link: str | None = None,
        form: dict[str, Any] | None = None,
    ) -> Page:
        """A page showing an upstream server's question: an address to open, or a form to fill."""
        page = Page("question", owner, session_id, upstream, upstream, message, None, self._expiry(), link, form)
        return self._open(page)

    def want(self) -> None:
        """A page or the dashboard is about to have a URL: the page server starts, if it has not."""
        if self.wanted is not None:
            self.wanted.set()

    def lookup(self, token: str) -> Page | None:
        self._forget_old()
        return self._pages.get(token)

    def find(self, kind: Kind, session_id: str, request_key: str) -> Page | None:
        """The page of exactly this request of this session still open or holding its answer (a 2026-07-28
        retry picks it up there)."""
        self._forget_old()
        for page in self._pages.values():
            live = page.state == "open" or page.answer is not None
            if live and (page.kind, page.session_id, page.request_key) == (kind, session_id, request_key):
                return page
        return None

    def answer(self, page: Page, answer: PageAnswer) -> bool:
        """Record the person's answer; False if the page is no longer open (answered, closed or expired)."""
        if page.state != "open" or page.expired():
            return False
        page.state, page.answer = "answered", answer
        page.done.set()
        return True

    async def wait(self, page: Page, within: float) -> PageAnswer | None:
        """The answer, once given, or None when `within` seconds or the page's life end first. The page is closed
        either way and its answer taken off it: it serves once."""
        with anyio.move_on_after(max(0.0, min(within, page.expires_at - time.monotonic()))):
            await page.done.wait()
        answer, page.answer = page.answer, None
        self.close(page)
        return answer

    def close(self, page: Page) -> None:
        """No answer is taken from now on (an answer already given stays until `wait` takes it)."""
        if page.state == "open":
            page.state = "closed"
        page.done.set()

    def _expiry(self) -> float:
        return time.monotonic() + self._ttl

    def _open(self, page: Page) -> Page:
        """Room is made by forgetting the oldest pages no longer live: the owner's own when it is at its share,
        anyone's when the board is full. A live page is never forgotten, so one principal opening many pages
        cannot take another's open question away; past its share it is refused instead."""
        self._forget_old()
        share = share_of(page.owner, self._capacity)
        own = [p for p in self._pages.values() if p.owner == page.owner]
        if len(own) >= share:
            self._forget_oldest_done(own, len(own) - share + 1)
            if sum(p.owner == page.owner for p in self._pages.values()) >= share:
                raise PagesFull(
                    f"{share} one-time pages of yours are waiting for an answer already; answer or deny "
                    "them (or let them expire) before asking again."
                )
        if len(self._pages) >= self._capacity:
            self._forget_oldest_done(list(self._pages.values()), len(self._pages) - self._capacity + 1)
            if len(self._pages) >= self._capacity:
                raise PagesFull("Too many one-time pages are waiting for an answer on this server; try again later.")
        self._pages[page.token] = page
        self.want()
        return page

    def _forget_oldest_done(self, pages: list[Page], count: int) -> None:
        for page in [p for p in pages if not p.live][:count]:
            self.close(self._pages.pop(page.token))

    def _forget_old(self) -> None:
        """An expired page drops an answer nobody took (a secret is not kept); later it is forgotten."""
        now = time.monotonic()
        for page in self._pages.values():
            if now >= page.expires_at:
                page.answer = None
        for token in [t for t, p in self._pages.items() if now >= p.expires_at + FORGET_AFTER_SECONDS]:
            del self._pages[token]


def secret_key(tool_name: str, name: str) -> str:
    return f"{tool_name}/{name}"
