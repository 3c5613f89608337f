"""The VariableInput port over MCP: how a missing variable's value reaches the call, for every kind of client.

- A text value is asked by form elicitation: an input-required round (2026-07-28), or `elicitation/create` on the
  call's own stream (handshake era), with a bounded wait. Anything but a non-empty answer is a no.
- A secret is never asked through a form (the MCP spec forbids it: a form's answer passes through the client).
  It goes to the URL-mode asker (a one-time loopback page) where the server has one; otherwise the answer is
  `unavailable`, and the call's result tells the person to run `managed-tools secret set NAME`.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, SecretStr, ValidationError

from managed_tools.tools.framework.calls.variables import secret_command
from managed_tools.tools.framework.context.context import Attachment, Runtime
from managed_tools.tools.framework.context.ports import VariableAnswer, VariableInput, VariableRequest

log = logging.getLogger("managed_tools.variables")

INPUT_KEY = "variable"


class RoundTripInput(VariableInput, Protocol):
    """A VariableInput over one tools/call that may answer `input_required`: `input_required` then holds the
    result the server sends back (2026-07-28), as CallConsent does."""

    input_required: types.InputRequiredResult | None


# Builds the URL-mode asker for secrets of one tools/call (the loopback page server's).
SecretInputFactory = Callable[
    [Runtime, Attachment, ServerRequestContext[Any], types.CallToolRequestParams], RoundTripInput
]


class _State(BaseModel):
    """The plaintext of our `requestState` (the SDK seals it): which variable the answer is for, and where."""

    variable: str
    session_id: str


def value_schema(request: VariableRequest) -> dict[str, Any]:
    field = {"type": "string", "title": request.name, "description": request.description or request.name}
    return {"type": "object", "properties": {"value": field}, "required": ["value"]}


def question(request: VariableRequest) -> str:
    about = f": {request.description}" if request.description else ""
    return f"{request.tool_name} needs a value for {request.name}{about}. It is kept for this session."


class CallVariables:
    """The VariableInput of one `tools/call`. After a call, `input_required` holds the result to send back."""

    def __init__(
        self,
        runtime: Runtime,
        attachment: Attachment,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        *,
        wait_seconds: float,
        secrets: RoundTripInput | None = None,
    ) -> None:
        self._runtime = runtime
        self._attachment = attachment
        self._ctx = ctx
        self._params = params
        self._wait = wait_seconds
        self._secrets = secrets
        self.input_required: types.InputRequiredResult | None = None

    async def ask(self, request: VariableRequest) -> VariableAnswer:
        if request.type == "secret":
            return await self._secret(request)
        caps = self._ctx.session.client_capabilities
        if caps is None or caps.elicitation is None:
            return VariableAnswer(status="unavailable")
        if self._ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return self._input_required_round(request)
        if self._ctx.session.can_send_request:
            return await self._elicit(request)
        return VariableAnswer(status="unavailable")

    async def _secret(self, request: VariableRequest) -> VariableAnswer:
        if self._secrets is not None:
            answer = await self._secrets.ask(request)
            if answer.status == "input_required":
                self.input_required = self._secrets.input_required
            if answer.status != "unavailable":
                return answer
        # The full command, with the data dir (a host path), goes to the server log only the person sees.
        where = shlex.quote(str(self._runtime.environment.data_dir))
        command = secret_command(request.name, self._runtime.environment.agent_id)
        log.warning("%s needs the secret %s: run %s --data-dir %s", request.tool_name, request.name, command, where)
        return VariableAnswer(status="unavailable")

    def _input_required_round(self, request: VariableRequest) -> VariableAnswer:
        state = self._our_state()
        if state is not None and state.variable == request.name:
            answer = (self._params.input_responses or {}).get(INPUT_KEY)
            return _judge(answer if isinstance(answer, types.ElicitResult) else None)
        elicitation = types.ElicitRequest(
            params=types.ElicitRequestFormParams(message=question(request), requested_schema=value_schema(request))
        )
        self.input_required = types.InputRequiredResult(
            input_requests={INPUT_KEY: elicitation},
            request_state=_State(variable=request.name, session_id=self._attachment.session_id).model_dump_json(),
        )
        return VariableAnswer(status="input_required")

    def _our_state(self) -> _State | None:
        """The sealed state of our own earlier round in this session (a permission round's is not ours)."""
        if self._params.request_state is None:
            return None
        try:
            state = _State.model_validate_json(self._params.request_state)
        except ValidationError:
            return None
        return state if state.session_id == self._attachment.session_id else None

    async def _elicit(self, request: VariableRequest) -> VariableAnswer:
        answer: types.ElicitResult | None = None
        with anyio.move_on_after(self._wait):
            try:
                answer = await self._ctx.session.elicit_form(
                    question(request), requested_schema=value_schema(request), related_request_id=self._ctx.request_id
                )
            except Exception as exc:  # a client that answers garbage or an error: no value, not a crash
                log.warning("elicitation of %s failed: %s", request.name, type(exc).__name__)
        return _judge(answer)


def _judge(answer: types.ElicitResult | None) -> VariableAnswer:
    """Only an accepted, non-empty text is a value; anything else is a no."""
    content = answer.content if answer is not None and isinstance(answer.content, dict) else {}
    value = content.get("value")
    if answer is None or answer.action != "accept" or not isinstance(value, str) or not value.strip():
        return VariableAnswer(status="declined")
    return VariableAnswer(status="provided", value=SecretStr(value))
