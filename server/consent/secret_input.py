"""A secret asked on a one-time page (URL-mode elicitation): the `VariableInput` for `type: secret`.

Handshake era: `elicitation/create` in URL mode on the call's own stream, then the page's answer (bounded wait),
then the completion notice. 2026-07-28: `ask` leaves `input_required` (the round to return to the client) and
answers `unavailable`; the client's retry carries its accept / decline, and the page, found again by the durable
session, tool and variable name (the client never names it), gives the value. Any other client: `unavailable`,
naming `managed-tools secret set NAME`.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from managed_tools.server.consent.board import Page, PageAnswer, Pages, PagesFull, secret_key
from managed_tools.tools.framework.context.context import Attachment
from managed_tools.tools.framework.context.ports import VariableAnswer, VariableRequest


class PageSecretInput:
    """Built per `tools/call` like `CallConsent` (the same request context, params, attachment and wait), plus
    the page server. After `ask` answered `input_required` (a 2026-07-28 connection that can open URLs),
    `input_required` holds the round to send back."""

    def __init__(
        self,
        pages: Pages,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        attachment: Attachment,
        *,
        wait_seconds: float,
    ) -> None:
        self._pages = pages
        self._ctx = ctx
        self._params = params
        self._session_id = attachment.session_id
        self._owner = attachment.owner
        self._wait = wait_seconds
        self.input_required: types.InputRequiredResult | None = None

    async def ask(self, request: VariableRequest) -> VariableAnswer:
        caps = self._ctx.session.client_capabilities
        urls = caps is not None and caps.elicitation is not None and caps.elicitation.url is not None
        try:
            if request.type == "secret" and urls and self._ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return await self._input_required_round(request)
            if request.type == "secret" and urls and self._ctx.session.can_send_request:
                return await self._elicit(request)
        except PagesFull as exc:  # this principal's share of the pages is taken
            return VariableAnswer(status="unavailable", note=str(exc))
        return unavailable(request)

    async def _elicit(self, request: VariableRequest) -> VariableAnswer:
        page = self._open(request)
        answer: PageAnswer | None = None
        try:
            with anyio.move_on_after(self._wait):
                opened = await self._ctx.session.elicit_url(
                    _message(request),
                    self._pages.url(page),
                    page.elicitation_id,
                    related_request_id=self._ctx.request_id,
                )
                if opened.action != "accept":
                    return VariableAnswer(status="declined")
                answer = await self._pages.wait(page, self._wait)
        finally:
            self._pages.close(page)
        if answer is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await self._ctx.session.send_elicit_complete(
                    page.elicitation_id, related_request_id=self._ctx.request_id
                )
        return _answered(request, answer)

    async def _input_required_round(self, request: VariableRequest) -> VariableAnswer:
        key = input_key(request.name)
        page = self._pages.find("secret", self._session_id, secret_key(request.tool_name, request.name))
        reply = (self._params.input_responses or {}).get(key)
        if page is None or not isinstance(reply, types.ElicitResult):
            page = page or self._open(request)
            params = types.ElicitRequestURLParams(
                message=_message(request), url=self._pages.url(page), elicitation_id=page.elicitation_id
            )
            self.input_required = types.InputRequiredResult(
                input_requests={key: types.ElicitRequest(params=params)}, request_state=self._params.request_state
            )
            return VariableAnswer(status="input_required")
        if reply.action != "accept":
            self._pages.close(page)
            return VariableAnswer(status="declined")
        return _answered(request, await self._pages.wait(page, self._wait))

    def _open(self, request: VariableRequest) -> Page:
        return self._pages.open_secret(
            owner=self._owner,
            session_id=self._session_id,
            tool_name=request.tool_name,
            name=request.name,
            description=request.description,
        )


def input_key(name: str) -> str:
    return f"secret:{name}"


def unavailable(request: VariableRequest) -> VariableAnswer:
    return VariableAnswer(
        status="unavailable",
        note=(
            f"{request.tool_name} needs the secret {request.name}, and it was not entered. Ask the person to run "
            f"`managed-tools secret set {request.name}` in a terminal (with the server's --data-dir, if it has one), "
            f"then call {request.tool_name} again."
        ),
    )


def _message(request: VariableRequest) -> str:
    return f"{request.tool_name} needs the secret {request.name}. Enter it on the one-time page (never in the chat)."


def _answered(request: VariableRequest, answer: PageAnswer | None) -> VariableAnswer:
    if answer is None:
        return unavailable(request)  # no answer in time: the terminal is still a way
    if not answer.approve or answer.value is None:
        return VariableAnswer(status="declined")
    return VariableAnswer(status="provided", value=answer.value)
