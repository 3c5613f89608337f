"""The dashboard over HTTP, under `/d/<token>/`: the page, `state` (JSON), `stream` (SSE), `diff`, `answer`.

The approval pages' checks hold here too: the Host must be this server exactly (a DNS-rebound name is refused),
every path carries the dashboard's token (256 bits; a wrong one is 404), an answer is a same-origin form POST
(server/pages/site.py `foreign_post`) carrying the page's CSRF token and the answer token bound to its request.
Nothing is logged; every response carries the page's strict headers.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import AsyncIterator
from typing import Any, get_args

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from managed_tools.server.consent.bound_answers import Decision
from managed_tools.server.dashboard import page
from managed_tools.server.dashboard.board import Dashboard, pending_views
from managed_tools.server.pages.site import foreign_post, read_form
from managed_tools.stores import overview
from managed_tools.stores.overview import VersionStore

PATH = re.compile(r"/d/([A-Za-z0-9_-]{43})/(state|stream|diff|answer)?")
POLL_SECONDS = 0.3  # the event stream's read of the events table: one primary-key range read
KEEPALIVE_SECONDS = 15.0
MAX_STREAMS = 16
VERSION_ID = re.compile(r"[0-9a-f-]{36}")
STORES: dict[str, VersionStore] = {name: name for name in get_args(VersionStore)}
DECISIONS: dict[str, Decision] = {name: name for name in get_args(Decision)}


class DashboardSite:
    """The ASGI app of one dashboard (served alone, or under the page server's `/d/`)."""

    def __init__(self, dashboard: Dashboard) -> None:
        self._board = dashboard
        self._streams = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = await self._respond(Request(scope, receive))
        await response(scope, receive, send)

    async def _respond(self, request: Request) -> Response:
        if (request.headers.get("host") or "").lower() != self._board.authority:
            return _json(421, "This dashboard answers only at the address it was given by.")
        matched = PATH.fullmatch(request.url.path)
        if matched is None or not hmac.compare_digest(matched.group(1).encode(), self._board.token.encode()):
            return _json(404, "There is no such page.")
        route = matched.group(2)
        if route == "answer":
            return await self._answer(request) if request.method == "POST" else _json(405, "POST only.")
        if request.method != "GET":
            return _json(405, "GET only.")
        if route is None:
            return HTMLResponse(page.document(self._board.csrf, self._board.where), headers=page.HEADERS)
        if route == "state":
            return await self._state()
        if route == "diff":
            return await self._diff(request)
        return self._stream(request)

    async def _state(self) -> Response:
        async with self._board.db.read() as tx:
            body: dict[str, Any] = {
                "approvals": await pending_views(tx, self._board.answers.token),
                "sessions": [s.model_dump() for s in await overview.sessions(tx)],
                "events": [e.model_dump() for e in await overview.recent_events(tx)],
                "lastSeq": await overview.last_seq(tx),
                "versions": [v.model_dump() for v in await overview.versions(tx)],
                "grades": [g.model_dump() for g in await overview.grades(tx)],
                "refusals": [r.model_dump() for r in await overview.refusals(tx)],
            }
        return JSONResponse(body, headers=page.HEADERS)

    async def _diff(self, request: Request) -> Response:
        store = STORES.get(request.query_params.get("store", ""))
        version_id = request.query_params.get("id", "")
        if store is None or not VERSION_ID.fullmatch(version_id):
            return _json(400, "Name a store (memory or substrate) and a version id.")
        async with self._board.db.read() as tx:
            diff = await overview.version_diff(tx, store, version_id)
        if diff is None:
            return _json(404, "There is no such version.")
        return JSONResponse({"diff": diff}, headers=page.HEADERS)

    def _stream(self, request: Request) -> Response:
        """Events as they are appended, from any process: the events table polled by sequence number."""
        if self._streams >= MAX_STREAMS:
            return _json(503, "Too many open event streams on this dashboard.")
        after = request.headers.get("last-event-id") or request.query_params.get("after") or ""
        start = int(after) if after.isdigit() else None
        return StreamingResponse(
            self._events(start), media_type="text/event-stream", headers=page.HEADERS | {"X-Accel-Buffering": "no"}
        )

    async def _events(self, seq: int | None) -> AsyncIterator[str]:
        self._streams += 1
        try:
            if seq is None:
                async with self._board.db.read() as tx:
                    seq = await overview.last_seq(tx)
            yield "retry: 2000\n\n"
            quiet = 0.0
            while True:
                async with self._board.db.read() as tx:
                    batch = await overview.events_after(tx, seq)
                for event in batch:
                    seq = event.seq
                    yield f"id: {event.seq}\nevent: event\ndata: {event.model_dump_json()}\n\n"
                quiet = 0.0 if batch else quiet + POLL_SECONDS
                if quiet >= KEEPALIVE_SECONDS:
                    quiet = 0.0
                    yield ": still here\n\n"
                await anyio.sleep(POLL_SECONDS)
        finally:
            self._streams -= 1

    async def _answer(self, request: Request) -> Response:
        refused = foreign_post(request.headers, self._board.origin)
        if refused is not None:
            return _json(refused[0], refused[2])
        form = await read_form(request)
        if form is None:
            return _json(400, "The answer must be the dashboard's form.")
        if not hmac.compare_digest(form.get("csrf", "").encode(), self._board.csrf.encode()):
            return _json(403, "This answer did not come from this dashboard.")
        decision = DECISIONS.get(form.get("decision", ""))
        if decision is None:
            return _json(400, "Choose approve, approve-session or deny.")
        answered = await self._board.answer(form.get("request", ""), form.get("token", ""), decision)
        return _json(answered.status, answered.message)


def _json(status: int, message: str) -> Response:
    return Response(
        json.dumps({"message": message}), status_code=status, media_type="application/json", headers=page.HEADERS
    )
