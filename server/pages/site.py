"""The pages over HTTP: `GET /p/<token>` shows the question, `POST /p/<token>` answers it, once.

Every request must name this server as Host exactly (`127.0.0.1:PORT`: a DNS-rebound name is refused). An answer
must come from the page itself (Sec-Fetch-Site and Origin, see `_foreign`) and carry the page's CSRF token.
Nothing here logs a request or its body, and no response carries the value.
"""

from __future__ import annotations

import hmac
import re
from typing import Any
from urllib.parse import parse_qs

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.types import Receive, Scope, Send

from managed_tools.server.consent.board import Page, PageAnswer, Pages
from managed_tools.server.pages import html

PAGE_PATH = re.compile(r"/p/([A-Za-z0-9_-]{43})")
MAX_BODY_BYTES = 16384
FORM_TYPE = "application/x-www-form-urlencoded"
MAX_FIELDS = 40  # the page's own and a question's form fields


class PageSite:
    """The ASGI app serving the board's pages."""

    def __init__(self, pages: Pages) -> None:
        self._pages = pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if self._pages.dashboard is not None and str(scope["path"]).startswith("/d/"):
            await self._pages.dashboard(scope, receive, send)
            return
        response = await self._respond(Request(scope, receive))
        await response(scope, receive, send)

    async def _respond(self, request: Request) -> HTMLResponse:
        headers = request.headers
        if (headers.get("host") or "").lower() != self._pages.authority:
            return _page(421, "Wrong address", "This page answers only at the address it was given by.")
        matched = PAGE_PATH.fullmatch(request.url.path)
        page = self._pages.lookup(matched.group(1)) if matched else None
        if page is None:
            return _page(404, "Not found", "There is no such page, or it is long expired.")
        if request.method == "GET":
            return self._show(page)
        if request.method != "POST":
            return _page(405, "Not allowed", "This page takes only GET and POST.")
        refused = foreign_post(headers, self._pages.origin)
        if refused is not None:
            return _page(*refused)
        form = await read_form(request)
        if form is None:
            return _page(400, "Bad request", "The answer must be this page's form.")
        if not hmac.compare_digest(form.get("csrf", "").encode(), page.csrf.encode()):
            return _page(403, "Refused", "This answer did not come from this page.")
        return self._answer(page, form)

    def _show(self, page: Page) -> HTMLResponse:
        if page.state == "answered":
            return _page(410, "Already answered", "This page has been answered; it works only once.")
        if page.state == "closed":
            return _page(410, "No longer open", "The request this page was for has ended.")
        if page.expired():
            return _page(410, "Expired", "This page has expired. The call it was for was not approved.")
        return HTMLResponse(html.question(page), headers=html.HEADERS)

    def _answer(self, page: Page, form: dict[str, str]) -> HTMLResponse:
        decision = form.get("decision")
        value = form.get("value", "")
        if page.kind == "approval" and decision in ("approve", "approve-session", "deny"):
            answer = PageAnswer(
                approve=decision != "deny", remember="session" if decision == "approve-session" else "once"
            )
        elif page.kind == "secret" and decision == "provide" and value and len(value) <= html.MAX_SECRET_CHARS:
            answer = PageAnswer(approve=True, value=SecretStr(value))
        elif page.kind == "secret" and decision == "decline":
            answer = PageAnswer(approve=False)
        elif page.kind == "question" and decision in ("decline", "done" if page.link else "submit"):
            content = None if decision != "submit" else filled(page.form or {}, form)
            if decision == "submit" and content is None:
                return _page(400, "Bad request", "Fill every required field with a value of its kind.")
            answer = PageAnswer(approve=decision != "decline", content=content)
        else:
            return _page(400, "Bad request", "Choose one of the page's buttons (a secret needs a value).")
        if not self._pages.answer(page, answer):
            return self._show(page)
        if page.kind == "question":
            done = (
                ("Sent", f"Your answer went to {page.tool_name}.") if answer.approve else ("Declined", "Nothing sent.")
            )
        elif page.kind == "secret":
            done = ("Received", "The value went to the server.") if answer.approve else ("Declined", "Nothing saved.")
        else:
            done = ("Approved", "The call goes on.") if answer.approve else ("Denied", "The call will not run.")
            if answer.remember == "session":
                done = ("Approved for this session", "The call goes on, and runs again unasked in this session.")
        return _page(200, done[0], done[1] + " You can close this page.")


def foreign_post(headers: Headers, origin: str) -> tuple[int, str, str] | None:
    """Why a POST is refused (status, heading, text), or None when it comes from a page of `origin` as a form.

    A browser says where a POST comes from in Sec-Fetch-Site, which no script can set: it must be `same-origin`.
    Our `no-referrer` policy makes Chromium send `Origin: null` on a page's own form, so null passes only beside
    that; without Sec-Fetch-Site (an older browser) the Origin must be ours exactly."""
    site, sent = headers.get("sec-fetch-site"), headers.get("origin")
    same = site == "same-origin" and sent in (origin, "null") if site is not None else sent == origin
    if not same:
        return 403, "Refused", "Answers are taken only from the page itself."
    if (headers.get("content-type") or "").split(";")[0].strip().lower() != FORM_TYPE:
        return 415, "Bad request", "The answer must be this page's form."
    return None


async def read_form(request: Request) -> dict[str, str] | None:
    """The urlencoded form, bounded, one value per field; None for anything else."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    try:
        fields = parse_qs(body.decode("utf-8"), strict_parsing=bool(body), max_num_fields=MAX_FIELDS)
    except ValueError:
        return None
    if any(len(values) != 1 for values in fields.values()):
        return None
    return {name: values[0] for name, values in fields.items()}


def filled(schema: dict[str, Any], form: dict[str, str]) -> dict[str, str | int | float | bool] | None:
    """A question's form as the person filled it, each value of its field's kind; None when a required field is
    empty or a value is not of its kind (an unchecked box is false)."""
    content: dict[str, str | int | float | bool] = {}
    for name, spec in schema.get("properties", {}).items():
        raw = form.get(html.FIELD_PREFIX + name)
        kind = spec.get("type")
        if kind == "boolean":
            content[name] = raw == "true"
            continue
        if not raw:
            if name in schema.get("required", ()):
                return None
            continue
        try:
            value: str | int | float = int(raw) if kind == "integer" else float(raw) if kind == "number" else raw
        except ValueError:
            return None
        if len(raw) > html.MAX_FIELD_CHARS or ("enum" in spec and value not in spec["enum"]):
            return None
        content[name] = value
    return content


def _page(status: int, heading: str, text: str) -> HTMLResponse:
    return HTMLResponse(html.notice(heading, text), status_code=status, headers=html.HEADERS)
