"""A session's run through a model that chooses tool calls: the client's (sampling with tools) or the operator's
(config.json `models`). Both are the same loop: every call goes through the executor in the session's own wake,
so its validation, permission pauses and events are the session's; the model's final answer is written to the
session's log as an `agent.message` event.

The model sees the session's conversation so far (its `user.message` and `agent.message` events, newest last),
with the active outcome after the first message; the tool calls of earlier runs are in the log, which its
session tools read.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import anyio

from managed_tools.stores import delegations, events, outcomes, sessions
from managed_tools.stores.db import Tx
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.calls.arguments import clip
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Attachment, Ports, Runtime
from managed_tools.tools.framework.context.ports import (
    ApprovalDecision,
    ApprovalRequest,
    ChildModel,
    Consent,
    ModelTurn,
    NoChildModel,
    SamplingUnavailableError,
    ToolSpec,
)
from managed_tools.tools.framework.context.uris import view_uri
from managed_tools.tools.framework.context.what_runs import visible
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.registry import Visible
from managed_tools.tools.framework.wire.models import WireModel

MAX_MODEL_TOKENS = 4000
HISTORY_MESSAGES = 40  # the conversation a run starts from: the last N messages of the session
ANSWER_EVENT = "agent.message"
COMPLETED_EVENT = "session.child_completed"  # queued to the parent of a child with implicit communication
# A run cannot delegate or run children of its own: one level, bounded. Its final text is its answer, so the
# attached client's way to answer (session_answer_parent) is not offered either.
NOT_FOR_CHILDREN = frozenset(
    {"session_delegate", "session_run_child", "session_message_child", "session_answer_parent"}
)

StopReason = Literal["idle", "max_cycles", "requires_action", "model_error", "refused", "progress", "no_progress"]


class CallRecord(WireModel):
    tool_name: str
    status: str
    error_kind: str | None
    request_id: str | None


@dataclasses.dataclass
class SessionRun:
    """What one run did: its model turns, why it stopped, the last answer, the calls, the events it took up."""

    cycles: int = 0
    stop: StopReason = "idle"
    response: str | None = None
    calls: list[CallRecord] = dataclasses.field(default_factory=list)
    processed: list[str] = dataclasses.field(default_factory=list)
    wake_id: str | None = None
    touched: set[str] = dataclasses.field(default_factory=set)  # resources the run changed (a parent's children)


async def run_session(
    runtime: Runtime,
    session_id: str,
    model: ChildModel,
    outer: Ports,
    *,
    owner: str,
    cycles: int,
    transport: str,
    started_by: str | None,
) -> SessionRun:
    """Up to `cycles` model turns in a new wake of the session. `outer` lends the caller's progress, log and
    sampler; `model.consent_in` asks about the session's own calls. `started_by`: the parent session, if any."""
    run = SessionRun()
    async with runtime.db.write() as tx:
        wake = await sessions.open_wake(
            tx, session_id, transport=transport, setup_fingerprint=setup_fingerprint(runtime)
        )
        how = "through the client's model" if transport == "sampling" else "by the configured model"
        await events.append_event(
            tx,
            session_id,
            wake.id,
            "span.started",
            {"spanId": wake.id, "spanKind": "wake", "transport": transport, "parentSessionId": started_by},
            summary=f"Run {'by its parent ' if started_by else ''}{how}",
        )
        run.processed = await events.mark_processed(tx, session_id)
        conversation = await conversation_of(tx, session_id)
        record = await sessions.get_session(tx, session_id)
        delegation = await delegations.get(tx, session_id)
        narrowed = await delegations.narrowed_tools(tx, session_id)
    run.wake_id = wake.id
    attachment = Attachment(session_id=session_id, wake_id=wake.id, transport=transport, owner=owner)
    consent = AskedFor(model.consent_in(session_id, wake.id), who_asks(record, delegation, transport, started_by))
    ports = dataclasses.replace(outer, consent=consent, child_model=NoChildModel())

    def offered(definition: ToolDefinition) -> bool:
        """Sent to the model and callable: never a delegation tool, and only what the parent gave it, if it
        narrowed the tools (session_delegate tools/toolsets). The executor refuses any other as unknown, routed
        calls (sandbox_execute's actions) and tools_call's included."""
        return definition.name not in NOT_FOR_CHILDREN and (narrowed is None or definition.name in narrowed)

    tools = [
        ToolSpec(name=d.name, description=d.description, input_schema=d.input_schema())
        for d in runtime.registry
        if offered(d)
    ]
    try:
        await _turns(
            run, runtime, attachment, ports, model, conversation=conversation, tools=tools, cycles=cycles,
            offered=offered,
        )  # fmt: skip
    finally:
        with anyio.CancelScope(shield=True):
            async with runtime.db.write() as tx:
                await sessions.close_wake(tx, wake.id)
                if run.response and run.stop in ("idle", "refused", "max_cycles", "requires_action"):
                    await events.append_event(
                        tx,
                        session_id,
                        wake.id,
                        ANSWER_EVENT,
                        {"text": run.response, "stopReason": run.stop},
                        summary=run.response[:200],
                    )
                if run.stop in ("idle", "refused") and (
                    told := await tell_parent(tx, session_id, run.stop, run.response)
                ):
                    run.touched.add(told)
                await events.append_event(
                    tx,
                    session_id,
                    wake.id,
                    "span.completed",
                    {"spanId": wake.id, "spanKind": "wake", "result": run.stop},
                    summary=f"Run ended: {run.stop}",
                )
    return run


@dataclasses.dataclass(frozen=True)
class AskedFor:
    """A run's consent: every question it puts to a person first says whose call it is and that a model, not the
    person's own client, made it (issue 38 item 6)."""

    inner: Consent
    who: str

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        return await self.inner.ask(request.model_copy(update={"message": f"{self.who}\n\n{request.message}"}))


def who_asks(
    record: sessions.SessionRecord, delegation: delegations.Delegation | None, transport: str, started_by: str | None
) -> str:
    """The line a person reads before a run's question: the session (the child's name, else its title, made
    visible and bounded), whose child it is, and which model runs it headless."""
    label = delegation.name if delegation is not None else record.title
    title = f" ({visible(clip(label, 80))})" if label else ""
    child = f", a child delegated by session {started_by}," if started_by else ""
    model = "the client's model (sampling)" if transport == "sampling" else "the configured model (config.json)"
    return (
        f"Asked by session {record.id}{title}{child} run headless by {model}: no person typed this call, "
        "its model chose it."
    )


async def tell_parent(tx: Tx, session_id: str, stop: StopReason, response: str | None) -> str | None:
    """A child delegated with `parentCommunication: implicit` queues its completion to its parent: a pending event
    there (taken up by the parent's next run); returns the parent's children resource to update, or None."""
    delegation = await delegations.get(tx, session_id)
    if delegation is None or delegation.parent_communication != "implicit":
        return None
    parent = delegation.parent_session_id
    await events.append_event(
        tx,
        parent,
        None,
        COMPLETED_EVENT,
        {"childSessionId": session_id, "name": delegation.name, "stopReason": stop, "response": response},
        summary=f"Child {delegation.name} finished: {(response or stop)[:160]}",
        processed=False,
    )
    return view_uri("children", parent)


async def _turns(
    run: SessionRun,
    runtime: Runtime,
    attachment: Attachment,
    ports: Ports,
    model: ChildModel,
    *,
    conversation: list[ModelTurn],
    tools: list[ToolSpec],
    cycles: int,
    offered: Visible,
) -> None:
    while run.cycles < cycles:
        try:
            turn = await model.turn(
                _SYSTEM.format(session=attachment.session_id), conversation, tools, max_tokens=MAX_MODEL_TOKENS
            )
        except SamplingUnavailableError as exc:
            run.stop, run.response = "model_error", str(exc)
            return
        run.cycles += 1
        run.response = turn.text or run.response
        conversation.append(turn)
        if turn.refused:
            run.stop = "refused"
            return
        if not turn.calls:
            run.stop = "idle"
            return
        results: list[tuple[str, str, bool]] = []
        for call in turn.calls:
            if call.name in NOT_FOR_CHILDREN:  # not offered, and refused if named anyway
                run.calls.append(
                    CallRecord(tool_name=call.name, status="error", error_kind="unknown_tool", request_id=None)
                )
                results.append((call.id, f"{call.name} is not available inside a child's run.", True))
                continue
            result = await execute(runtime, attachment, ports, call.name, call.arguments, visible=offered)
            request = (result.action_required or {}).get("requestId")
            run.calls.append(
                CallRecord(tool_name=call.name, status=result.status, error_kind=result.error_kind, request_id=request)
            )
            results.append((call.id, result.text, result.is_error))
            if result.status == "blocked" and result.error_kind in ("permission", "input_required"):
                run.stop = "requires_action"  # a person must answer before the session goes on
                return
        conversation.append(ModelTurn(role="user", results=results))
    run.stop = "max_cycles"


_SYSTEM = (
    "You are working in session {session}. Do its task with the tools offered; every call runs in that "
    "session. When the task is done, or you cannot go on, answer with a short summary and no tool calls."
)


async def conversation_of(tx: Tx, session_id: str) -> list[ModelTurn]:
    """The session's messages as turns (consecutive ones of a role joined, as the APIs want them alternating),
    the outcome after the first; a session without one starts from its title."""
    found = await events.window_events(
        tx, session_id, events.EventFilter(types=["user.message", ANSWER_EVENT], limit=HISTORY_MESSAGES)
    )
    turns: list[ModelTurn] = []
    for event in found:
        role: Literal["user", "assistant"] = "assistant" if event.type == ANSWER_EVENT else "user"
        text = str(event.payload.get("text", ""))
        if turns and turns[-1].role == role:
            turns[-1] = ModelTurn(role=role, text=f"{turns[-1].text}\n\n{text}")
        else:
            turns.append(ModelTurn(role=role, text=text))
    if not turns or turns[0].role != "user":
        session = await sessions.get_session(tx, session_id)
        turns.insert(0, ModelTurn(role="user", text=session.title or "Continue the session's work."))
    outcome = await outcomes.active(tx, session_id)
    if outcome is not None:
        criteria = "".join(f"\n- {c}" for c in outcome.success_criteria)
        turns[0] = ModelTurn(role="user", text=f"{turns[0].text}\n\nDone means: {outcome.title}{criteria}")
    if turns[-1].role != "user":  # nothing new to answer: ask the model to go on
        turns.append(ModelTurn(role="user", text="Continue."))
    return turns
