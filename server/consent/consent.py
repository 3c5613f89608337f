"""The Consent port over MCP: how a permission question reaches a person, for every kind of client.

1. An approval already given out of band for exactly this call (same session, tool and argument digest) is
   used, once.
2. A 2026-07-28 client that declared elicitation gets an input-required result carrying the question; its
   retry carries the answer and a sealed `requestState` naming the request (the SDK's boundary verifies the
   seal, expiry and binding to tool + arguments; the request store refuses a replay).
3. A handshake-era client that declared elicitation gets `elicitation/create` on the call's own stream, with a
   bounded wait.
4. Anyone else: fail closed. The request is recorded and the answer comes from `managed-tools approve` (or
   `respond` for a custom tool); the next call with the same arguments then runs, once. So does an OAuth
   principal without the `approvals` scope (server/auth/principal.py): it may not answer its own questions.

Elicitation (2 or 3) asks through the client's form or, for a client that can open a URL but shows no form (or
every client, with config `approvals: "page"`), in URL mode: the person answers Approve / Deny on a one-time
loopback page showing the exact action (server/pages/), and the page's answer settles the request.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shlex
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from managed_tools.server.consent.board import Page, PageAnswer, Pages, PagesFull
from managed_tools.stores import approvals
from managed_tools.stores.approvals import ApprovalRecord
from managed_tools.stores.db import Tx
from managed_tools.stores.errors import NotFoundError
from managed_tools.tools.framework.context import telemetry
from managed_tools.tools.framework.context.context import Attachment, Runtime
from managed_tools.tools.framework.context.ports import ApprovalDecision, ApprovalRequest

log = logging.getLogger("managed_tools.consent")

INPUT_KEY = "consent"
MAX_NOTE_CHARS = 500
DECIDED_ELSEWHERE_POLL_SECONDS = 0.25  # one primary-key read per waiting question
CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve", "description": "Run exactly this action?"},
        "remember": {
            "type": "string",
            "title": "Remember",
            "description": "once: only this call. session: this exact command, cwd and env for the rest of the session",
            "enum": ["once", "session"],
            "default": "once",
        },
        # A default on every optional field: a client that answers with a typed form (FastMCP) sends each field,
        # null where no default says otherwise, and null is no string.
        "note": {"type": "string", "title": "Note", "description": "Optional note for the record", "default": ""},
    },
    "required": ["approve"],
}
FORM_TYPES = frozenset({"string", "number", "integer", "boolean"})


class _State(BaseModel):
    """The plaintext of our `requestState`; the SDK seals it, so a client can neither read nor forge it."""

    request_id: str


def _request_id(state: str | None) -> str | None:
    """The request our sealed state names; None for no state or a state of another kind of pause."""
    try:
        return None if state is None else _State.model_validate_json(state).request_id
    except ValidationError:
        return None


def form_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """An output schema usable as an elicitation form (flat properties of primitive types, or multi-select
    enums: arrays whose items are an `enum` or an `anyOf` of titled consts), else None."""
    if not schema or schema.get("type") != "object" or "$defs" in schema:
        return None
    properties = schema.get("properties", {})
    if not all(_form_field(prop) for prop in properties.values()):
        return None
    return {"type": "object", "properties": properties, "required": list(schema.get("required", []))}


def _form_field(prop: dict[str, Any]) -> bool:
    if prop.get("type") in FORM_TYPES:
        return True
    items = prop.get("items")
    return prop.get("type") == "array" and isinstance(items, dict) and ("enum" in items or "anyOf" in items)


ALREADY_USED = "that answer was already used or is for another call"


class OutOfBandConsent:
    """Steps 1 and 4 alone: where no client is there to ask (a session run headless, a wake), an approval given
    out of band is used once, and any other question is recorded for `managed-tools approve`."""

    def __init__(self, runtime: Runtime, attachment: Attachment) -> None:
        self._runtime = runtime
        self._attachment = attachment

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        used = await self._use_out_of_band_answer(request)
        return used if used is not None else await self._out_of_band(request)

    def in_session(self, session_id: str, wake_id: str) -> OutOfBandConsent:
        attachment = dataclasses.replace(self._attachment, session_id=session_id, wake_id=wake_id)
        return OutOfBandConsent(self._runtime, attachment)

    # -- 1. an answer given out of band ------------------------------------------------------------------

    async def _use_out_of_band_answer(self, request: ApprovalRequest) -> ApprovalDecision | None:
        async with self._runtime.db.write() as tx:
            record = await self._find(tx, request, "approved")
            if record is None or not await approvals.consume(tx, record.id, self._attachment.wake_id):
                return None
        return ApprovalDecision(status="approved", request_id=record.id, note=record.note, value=record.response)

    # -- 4. out of band ----------------------------------------------------------------------------------

    async def _out_of_band(self, request: ApprovalRequest) -> ApprovalDecision:
        async with self._runtime.db.write() as tx:
            record = await self._find(tx, request, "pending")
            if record is None:
                record = await self._create(tx, request, "out_of_band")
        return ApprovalDecision(status="pending", request_id=record.id, reason=self._instructions(record))

    def _instructions(self, record: ApprovalRecord) -> str:
        """What the model tells the person. It names no host path (the data dir): the full command, with its
        --data-dir, goes to the server's log (stderr), which only the person sees."""
        if record.kind == "custom_tool":
            command = f"managed-tools respond {record.id} --json '<result>'"
            text = (
                f"{record.tool_name} is answered by a person, and this client cannot show them the question. "
                f"Request {record.id} is waiting: ask them to run `{command}` in a terminal (with the server's "
                f"--data-dir, if it has one), then call {record.tool_name} again with the same arguments."
            )
        else:
            command = f"managed-tools approve {record.id}"
            text = (
                f"{record.tool_name} needs a person's approval before it runs, and this client cannot ask them. "
                f"Request {record.id} is waiting: ask them to run `{command}` (or `managed-tools deny "
                f"{record.id}`) in a terminal (with the server's --data-dir, if it has one; `managed-tools "
                f"pending` shows the question), then call {record.tool_name} again with exactly the same "
                "arguments. It runs once; other arguments need their own approval."
            )
        where = shlex.quote(str(self._runtime.environment.data_dir))
        log.warning("permission request %s waits for a person: %s --data-dir %s", record.id, command, where)
        return text

    async def _find(self, tx: Tx, request: ApprovalRequest, status: approvals.Status) -> ApprovalRecord | None:
        """This session's request for exactly this call (tool, kind and argument digest) in `status`."""
        return await approvals.find(
            tx, self._attachment.session_id, request.tool_name, request.args_digest, status=status, kind=request.kind
        )

    async def _create(self, tx: Tx, request: ApprovalRequest, channel: approvals.Channel) -> ApprovalRecord:
        return await approvals.create(
            tx,
            session_id=self._attachment.session_id,
            wake_id=self._attachment.wake_id,
            kind=request.kind,
            tool_name=request.tool_name,
            arguments=request.arguments,
            args_digest=request.args_digest,
            channel=channel,
            question=request.message,
            binds=[bound.model_dump(mode="json") for bound in request.binds],
            caps=self._runtime.pending_caps,
        )


class CallConsent(OutOfBandConsent):
    """Consent for one `tools/call`. After a call, `input_required` holds the result to send back (2026-07-28)."""

    def __init__(
        self,
        runtime: Runtime,
        attachment: Attachment,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        *,
        wait_seconds: float,
        answers: bool = True,
        pages: Pages | None = None,
        rounds: bool = True,
    ) -> None:
        super().__init__(runtime, attachment)
        self._ctx = ctx
        self._params = params
        self._wait = wait_seconds
        self._answers = answers  # may the caller answer in the client, or only a person at the server?
        self._pages = pages
        self._rounds = rounds  # may the question go back as an input-required result (not inside a child's run)
        self.input_required: types.InputRequiredResult | None = None

    def in_session(self, session_id: str, wake_id: str) -> CallConsent:
        """The same person, for a call made in another session of theirs (a child's run). Never by an
        input-required round: the run cannot stop for the client's retry, so a 2026-07-28 client's question waits
        out of band."""
        attachment = dataclasses.replace(self._attachment, session_id=session_id, wake_id=wake_id, transport="sampling")
        return CallConsent(
            self._runtime,
            attachment,
            self._ctx,
            self._params,
            wait_seconds=self._wait,
            answers=self._answers,
            pages=self._pages,
            rounds=False,
        )

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        used = await self._use_out_of_band_answer(request)
        if used is not None:
            return used
        with telemetry.approval_wait(request.tool_name):
            return await self._ask_a_person(request)

    async def _ask_a_person(self, request: ApprovalRequest) -> ApprovalDecision:
        schema = CONFIRM_SCHEMA if request.kind == "tool_confirmation" else form_schema(request.value_schema)
        asks = self._asks_by(request, schema)
        question = schema if asks == "form" else None  # None: the page asks
        if asks is not None and self._rounds and self._ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return await self._input_required_round(request, question)
        if asks is not None and self._ctx.session.can_send_request:
            return await self._elicit(request, question)
        return await self._out_of_band(request)

    def _asks_by(self, request: ApprovalRequest, schema: dict[str, Any] | None) -> Literal["form", "page"] | None:
        """How the client can ask: its form, our page (URL mode), or not at all. With `approvals: "page"` a
        permission question never goes to a form, so a client answering forms by itself cannot approve."""
        caps = self._ctx.session.client_capabilities
        modes = caps.elicitation if caps is not None else None
        if modes is None or not self._answers:
            return None
        urls = modes.url is not None
        forms = modes.form is not None or not urls  # an empty capability is form mode
        if self._pages is not None and request.kind == "tool_confirmation" and (self._pages.for_approvals or not forms):
            return "page" if urls else None
        return "form" if forms and schema is not None else None

    # -- 2. 2026-07-28: input-required round trip -------------------------------------------------------

    async def _input_required_round(self, request: ApprovalRequest, schema: dict[str, Any] | None) -> ApprovalDecision:
        """`schema` None: the question is a page, and the retry's accept means "I opened it": the page's own
        answer (given already, or awaited now, bounded) settles the request."""
        request_id = _request_id(self._params.request_state)
        if request_id is None:  # no state, or another pause's (a variable asked first in this call)
            record = await self._record(request, "input_required")
            params: types.ElicitRequestURLParams | types.ElicitRequestFormParams
            if schema is None:
                try:
                    params = self._page_params(self._open_page(record, request), request)
                except PagesFull as exc:
                    return await self._settle(record, request, None, reason=str(exc))
            else:
                params = types.ElicitRequestFormParams(message=request.message, requested_schema=schema)
            elicitation = types.ElicitRequest(params=params)
            self.input_required = types.InputRequiredResult(
                input_requests={INPUT_KEY: elicitation},
                request_state=_State(request_id=record.id).model_dump_json(),
            )
            return ApprovalDecision(status="input_required", request_id=record.id)
        async with self._runtime.db.read() as tx:
            try:
                record = await approvals.get(tx, request_id)
            except NotFoundError:
                return ApprovalDecision(status="denied", reason="the request state names no request")
        if not self._same_call(record, request, "input_required") or record.status not in ("pending", "approved"):
            return ApprovalDecision(status="denied", request_id=request_id, reason=ALREADY_USED)
        if record.status == "approved":  # a person approved it out of band meanwhile (the dashboard, the CLI)
            return await self._settle(record, request, None)
        answer = (self._params.input_responses or {}).get(INPUT_KEY)
        reply = answer if isinstance(answer, types.ElicitResult) else None
        if schema is None:
            assert self._pages is not None
            page = self._pages.find("approval", self._attachment.session_id, record.id)
            if page is not None and reply is not None and reply.action == "accept":
                reply = _page_reply(await self._pages.wait(page, self._wait))
            elif page is not None:
                self._pages.close(page)  # the client would not open it: a no, and the page dies now
            else:
                reply = None  # no page for this request (another process, or long gone): no answer
        return await self._settle(record, request, reply)

    # -- 3. handshake era: elicitation/create on the call's own stream -------------------------------------

    async def _elicit(self, request: ApprovalRequest, schema: dict[str, Any] | None) -> ApprovalDecision:
        record = await self._record(request, "elicitation")
        answer: types.ElicitResult | None = None
        with anyio.move_on_after(self._wait) as waiting:
            async with anyio.create_task_group() as watch:
                watch.start_soon(self._cancel_when_decided_elsewhere, record.id, waiting)
                try:
                    if schema is None:
                        answer = await self._elicit_page(record, request)
                    else:
                        answer = await self._ctx.session.elicit_form(
                            request.message, requested_schema=schema, related_request_id=self._ctx.request_id
                        )
                except PagesFull as exc:
                    return await self._settle(record, request, None, reason=str(exc))
                except Exception as exc:  # a client that answers garbage or an error gets a denial, not a crash
                    log.warning("elicitation for %s failed: %s", request.tool_name, type(exc).__name__)
                    return await self._settle(record, request, None, reason="the client could not show the question")
                finally:
                    watch.cancel_scope.cancel()
        return await self._settle(record, request, answer, reason=None if answer else "no answer in time")

    async def _cancel_when_decided_elsewhere(self, request_id: str, waiting: anyio.CancelScope) -> None:
        """A person may answer at the dashboard (or `managed-tools approve`) while the client's question is
        open, from any process sharing the store: the wait ends then, and `_settle` takes that answer."""
        while True:
            await anyio.sleep(DECIDED_ELSEWHERE_POLL_SECONDS)
            async with self._runtime.db.read() as tx:
                if (await approvals.get(tx, request_id)).status != "pending":
                    waiting.cancel()
                    return

    async def _elicit_page(self, record: ApprovalRecord, request: ApprovalRequest) -> types.ElicitResult | None:
        """URL mode: the client opens the page (accept) or refuses to (decline, cancel: a no); then the page's
        answer, and a completion notice so the client can close its prompt."""
        assert self._pages is not None
        page = self._open_page(record, request)
        try:
            params = self._page_params(page, request)
            opened = await self._ctx.session.elicit_url(
                params.message, params.url, page.elicitation_id, related_request_id=self._ctx.request_id
            )
            if opened.action != "accept":
                return opened
            reply = _page_reply(await self._pages.wait(page, self._wait))
        finally:
            self._pages.close(page)
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            await self._ctx.session.send_elicit_complete(page.elicitation_id, related_request_id=self._ctx.request_id)
        return reply

    def _open_page(self, record: ApprovalRecord, request: ApprovalRequest) -> Page:
        assert self._pages is not None
        return self._pages.open_approval(
            owner=self._attachment.owner,
            session_id=self._attachment.session_id,
            request_id=record.id,
            tool_name=request.tool_name,
            message=request.message,
        )

    def _page_params(self, page: Page, request: ApprovalRequest) -> types.ElicitRequestURLParams:
        assert self._pages is not None
        message = f"{request.tool_name} needs your approval. Open the one-time page to see the exact action."
        return types.ElicitRequestURLParams(
            message=message, url=self._pages.url(page), elicitation_id=page.elicitation_id
        )

    # -- shared ------------------------------------------------------------------------------------------

    async def _record(self, request: ApprovalRequest, channel: approvals.Channel) -> ApprovalRecord:
        async with self._runtime.db.write() as tx:
            return await self._create(tx, request, channel)

    def _same_call(self, record: ApprovalRecord, request: ApprovalRequest, channel: str) -> bool:
        return (
            record.session_id == self._attachment.session_id
            and record.tool_name == request.tool_name
            and record.args_digest == request.args_digest
            and record.kind == request.kind
            and record.channel == channel
        )

    async def _settle(
        self,
        record: ApprovalRecord,
        request: ApprovalRequest,
        answer: types.ElicitResult | None,
        *,
        reason: str | None = None,
    ) -> ApprovalDecision:
        """Turn the client's answer into a decision, record it, and consume it if it is a yes."""
        approved, note, value, why = _judge(request, answer)
        async with self._runtime.db.write() as tx:
            current = await approvals.get(tx, record.id)
            if current.status == "approved" and await approvals.consume(tx, record.id, self._attachment.wake_id):
                # A person approved it out of band (the dashboard, the CLI) while the question was open.
                return ApprovalDecision(status="approved", request_id=record.id, note=current.note)
            if current.status == "denied":
                return ApprovalDecision(status="denied", request_id=record.id, note=current.note, reason="denied")
            if current.status != "pending":  # a concurrent retry settled it first
                return ApprovalDecision(status="denied", request_id=record.id, reason=ALREADY_USED)
            await approvals.decide(
                tx,
                record.id,
                approved=approved,
                by=f"{record.channel}:{self._client_name()}",
                wake_id=self._attachment.wake_id,
                note=note,
                reason=reason or why,
                response=value,
                remember=_remember(request, answer) if approved else "once",
            )
            if approved:
                await approvals.consume(tx, record.id, self._attachment.wake_id)
        if approved:
            return ApprovalDecision(status="approved", request_id=record.id, note=note, value=value)
        return ApprovalDecision(status="denied", request_id=record.id, note=note, reason=reason or why)

    def _client_name(self) -> str:
        params = self._ctx.session.client_params
        return params.client_info.name if params is not None else "client"


def _page_reply(answer: PageAnswer | None) -> types.ElicitResult | None:
    """The page's Approve / Approve for the session / Deny as the answer a form would have given."""
    if answer is None:
        return None
    return (
        types.ElicitResult(action="accept", content={"approve": True, "remember": answer.remember})
        if answer.approve
        else types.ElicitResult(action="decline")
    )


def _remember(request: ApprovalRequest, answer: types.ElicitResult | None) -> approvals.Remember:
    """`session` only when the person chose it for a tool confirmation; anything else is once."""
    content = answer.content if answer is not None and isinstance(answer.content, dict) else {}
    return "session" if request.kind == "tool_confirmation" and content.get("remember") == "session" else "once"


def _judge(
    request: ApprovalRequest, answer: types.ElicitResult | None
) -> tuple[bool, str | None, dict[str, Any] | None, str]:
    """(approved, note, value, reason). Anything but a well-formed yes is a no."""
    if answer is None:
        return False, None, None, "no answer"
    if answer.action != "accept":
        return False, None, None, {"decline": "declined", "cancel": "cancelled"}[answer.action]
    content = answer.content if isinstance(answer.content, dict) else {}
    if request.kind == "custom_tool":
        return True, None, dict(content), "answered"
    raw_note = content.get("note")
    note = raw_note[:MAX_NOTE_CHARS] if isinstance(raw_note, str) and raw_note.strip() else None
    if content.get("approve") is True:
        return True, note, None, "approved"
    if content.get("approve") is False:
        return False, note, None, "declined"
    return False, note, None, "the answer was not a yes or no: " + json.dumps(content, default=str)[:80]
