"""Running a session with nobody attached: the operator's model (config.json `models`) takes the session's turns,
every tool call through the executor in the session's own wake. A question for a person (an always-ask tool)
cannot be shown here, so it waits out of band (`managed-tools approve`) and the run stops `requires_action`.

`run_session_headless` is the entry for callers with no client at all (a due wake). A parent running its child
goes through `session_run_child`, whose consent can still ask the parent's person on the call's stream.
"""

from __future__ import annotations

import dataclasses

from managed_tools.server.consent.consent import OutOfBandConsent
from managed_tools.stores import events, sessions
from managed_tools.tools.framework.context.context import Attachment, Ports, Runtime
from managed_tools.tools.framework.context.ports import Quiet
from managed_tools.tools.sessions.child_run import SessionRun, run_session

MAX_MESSAGE_CHARS = 8000
UNBOUNDED_CYCLES = 1000  # the model's own limits (turns, tokens, wall time) end the run first


class NoModelConfigured(Exception):
    """No `models` entry in config.json: nothing can run a session without a client."""


async def run_session_headless(runtime: Runtime, session_id: str, message: str | None = None) -> SessionRun:
    """Add `message` to the session as a user message (if given) and run the session with the configured model
    until it answers, needs a person, or reaches a limit. The answer is the session's `agent.message` event and
    the result's `response`."""
    provider = runtime.model_provider
    if provider is None:
        raise NoModelConfigured("No model is configured (config.json `models`), so a session cannot run headless.")
    async with runtime.db.write() as tx:
        session = await sessions.get_session(tx, session_id)
        if message:
            text = message[:MAX_MESSAGE_CHARS]
            await events.append_event(tx, session_id, None, "user.message", {"text": text}, summary=text[:200])
    consent = OutOfBandConsent(runtime, Attachment(session_id, "", "model", owner=session.owner))
    quiet = Quiet()
    outer = Ports(consent=consent, progress=quiet, sampler=provider.sampler(), client_log=quiet)
    return await run_session(
        runtime,
        session_id,
        provider.child_model(consent.in_session),
        outer,
        owner=session.owner,
        cycles=UNBOUNDED_CYCLES,
        transport="model",
        started_by=None,
    )


class HeadlessRunFailed(Exception):
    """The model could not finish the run (the provider failed, timed out, or a limit was reached)."""


class ModelHeadless:
    """The `HeadlessRun` port (`Runtime.headless`, what a due wake runs through) over the configured model."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime  # the runtime with the model, made before this port existed

    async def __call__(self, session_id: str, owner: str, message: str) -> str:
        """The session's answer; the owner is the session's own (run_session_headless reads it there)."""
        runtime = dataclasses.replace(self._runtime, headless=self)  # so calls made in the run see the port too
        run = await run_session_headless(runtime, session_id, message)
        if run.stop == "model_error":
            raise HeadlessRunFailed(run.response or "the model did not answer")
        if run.stop == "requires_action":
            requests = ", ".join(c.request_id for c in run.calls if c.request_id)
            return f"Waiting for a person's approval (request {requests}): managed-tools approve, then wake it again."
        return run.response or f"The run stopped ({run.stop}) without an answer."
