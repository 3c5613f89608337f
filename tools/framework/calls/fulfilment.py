"""Tools with no handler: a model is a latent tool's implementation (the client's, sampled, or the calling model,
to which the call is handed back), a person a custom tool's."""

from __future__ import annotations

from typing import Any

from managed_tools.stores import latent_calls
from managed_tools.tools.framework.calls.call import Call
from managed_tools.tools.framework.calls.call_result import Refusal
from managed_tools.tools.framework.context.ports import SamplingUnavailableError
from managed_tools.tools.framework.definitions import latent
from managed_tools.tools.framework.definitions.custom import OutputMismatch, check_output


async def fulfil_latent(call: Call) -> dict[str, Any]:
    """A model is the implementation: the client's, sampled, with one retry that shows it the schema error; or,
    where the client cannot be sampled, the calling model, to which the task is handed back."""
    definition, sampler = call.definition, call.ports.sampler
    prompt = latent.sampling_prompt(definition, call.canonical, call.values)
    try:
        answer = await sampler.sample(prompt, max_tokens=latent.SAMPLING_MAX_TOKENS)
    except SamplingUnavailableError:
        raise await _hand_back(call) from None
    try:
        return latent.check_text(definition, answer)
    except OutputMismatch as first:
        retry = latent.sampling_prompt(definition, call.canonical, call.values, refused=str(first))
        answer = await sampler.sample(retry, max_tokens=latent.SAMPLING_MAX_TOKENS)
    try:
        return latent.check_text(definition, answer)
    except OutputMismatch as second:
        raise Refusal(
            "tool_error",
            f"The model's answer for {definition.name} does not match its output schema, even after a retry "
            f"that showed it the error: {second}.",
        ) from None


async def _hand_back(call: Call) -> Refusal:
    """Record the call as waiting for the calling model's answer, bound to this session, and say how to give it."""
    span = call.span
    async with span.runtime.db.write() as tx:
        call_id = await latent_calls.open_call(
            tx, span.attachment.session_id, call.definition.name, span.span_id, call.canonical
        )
    action = {"callId": call_id, "toolName": call.definition.name, "submitWith": latent.SUBMIT_TOOL}
    return Refusal("handed_back", latent.handback_message(call.definition, call_id, call.values), "blocked", action)


def custom_output(call: Call, value: dict[str, Any] | None) -> dict[str, Any]:
    try:
        return check_output(call.definition, value or {})
    except OutputMismatch as exc:
        raise Refusal(
            "tool_error", f"The answer given for {call.definition.name} does not match its output schema: {exc}."
        ) from None
