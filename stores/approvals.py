"""Permission requests: what a person was asked to approve (a tool and its exact arguments), and the answer.

A request moves pending → approved → consumed (it ran, once) or pending → denied, or is cleared by an interrupt.
Every change is an event in the same transaction, and the session's status follows: `requires_action` while
any request of it waits for a person, `idle` otherwise.

Requests waiting for a person are capped per session and per principal (config.json `pendingApprovals`): a client
looping over new calls would otherwise pile up questions nobody can answer (10,000 were accepted for one
principal). The count and the insert share the write transaction, and write transactions run one at a time on
both engines (SQLite's one writer, PostgreSQL's advisory write lock: stores/db/postgres.py), so callers racing
past the cap cannot overshoot it. Another principal's requests never count against yours.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from managed_tools.stores import events
from managed_tools.stores.db import Row, Tx, as_dict
from managed_tools.stores.errors import NotFoundError, PendingCapError, StoreError
from managed_tools.stores.ids import utc_now, uuid7

Kind = Literal["tool_confirmation", "custom_tool"]
Channel = Literal["elicitation", "input_required", "out_of_band"]
Status = Literal["pending", "approved", "denied", "consumed", "cleared"]
# once: the approval runs the call once. session: a person approved this exact call (tool, arguments, command, cwd
# and env: its digest) for the rest of the session; after its first run it runs again unasked, until an interrupt.
Remember = Literal["once", "session"]
# Why a call that would ask ran without a question (the `permission.unasked` event says which).
Unasked = Literal["remembered", "auto_sandboxed"]


class PendingCaps(BaseModel):
    """config.json `pendingApprovals`: how many requests may wait for a person at once, in one session and across
    one principal's sessions. A person answers a few dozen at most; past that, more are noise."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    per_session: Annotated[int, Field(ge=1, le=10_000)] = Field(default=20, alias="perSession")
    per_principal: Annotated[int, Field(ge=1, le=100_000)] = Field(default=100, alias="perPrincipal")


DEFAULT_CAPS = PendingCaps()


class ApprovalRecord(BaseModel):
    id: str
    session_id: str
    kind: Kind
    tool_name: str
    arguments: dict[str, Any]
    args_digest: str
    channel: Channel
    status: Status
    requested_at: str
    decided_at: str | None
    decided_by: str | None
    note: str | None
    response: dict[str, Any] | None
    consumed_at: str | None
    question: str = ""  # exactly what the person is asked (the elicitation message); shown again by the CLI
    remember: Remember = "once"
    binds: list[dict[str, Any]] = []  # the workspace files the approved command runs, as they stood when asked


def _record(row: Row) -> ApprovalRecord:
    data = as_dict(row)
    data["arguments"] = json.loads(data["arguments"])
    data["response"] = None if data["response"] is None else json.loads(data["response"])
    data["binds"] = json.loads(data["binds"])
    return ApprovalRecord(**data)


async def _sync_session_status(tx: Tx, session_id: str) -> None:
    waiting = await tx.scalar(
        "SELECT COUNT(*) FROM approvals WHERE session_id = ? AND status = 'pending'", (session_id,)
    )
    status, reason = ("requires_action", "requires_action") if waiting else ("idle", None)
    await tx.execute(
        "UPDATE sessions SET status = ?, stop_reason = ? WHERE id = ? AND status != 'terminated'",
        (status, reason, session_id),
    )


async def create(
    tx: Tx,
    *,
    session_id: str,
    wake_id: str | None,
    kind: Kind,
    tool_name: str,
    arguments: dict[str, Any],
    args_digest: str,
    channel: Channel,
    question: str = "",
    binds: list[dict[str, Any]] | None = None,
    caps: PendingCaps = DEFAULT_CAPS,
) -> ApprovalRecord:
    await _check_caps(tx, session_id, tool_name, caps)
    record = ApprovalRecord(
        id=uuid7(),
        session_id=session_id,
        kind=kind,
        tool_name=tool_name,
        arguments=arguments,
        args_digest=args_digest,
        channel=channel,
        status="pending",
        requested_at=utc_now(),
        decided_at=None,
        decided_by=None,
        note=None,
        response=None,
        consumed_at=None,
        question=question,
        binds=binds or [],
    )
    await tx.execute(
        "INSERT INTO approvals (id, session_id, kind, tool_name, arguments, args_digest, channel, status, "
        "requested_at, question, binds) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
        (
            record.id,
            session_id,
            kind,
            tool_name,
            json.dumps(arguments, ensure_ascii=False),
            args_digest,
            channel,
            record.requested_at,
            question,
            json.dumps(record.binds, ensure_ascii=False),
        ),
    )
    await events.append_event(
        tx,
        session_id,
        wake_id,
        "permission.requested",
        {"requestId": record.id, "kind": kind, "toolName": tool_name, "argsDigest": args_digest, "channel": channel},
        summary=f"Awaiting {'confirmation to run' if kind == 'tool_confirmation' else 'a result for'} {tool_name}.",
    )
    await _sync_session_status(tx, session_id)
    return record


async def _check_caps(tx: Tx, session_id: str, tool_name: str, caps: PendingCaps) -> None:
    """Refuse a new request past the session's or its principal's cap (in the caller's write transaction)."""
    clear = (
        f"so {tool_name} was not asked about and did not run. A person can answer them: `managed-tools pending` "
        "lists them, `managed-tools approve ID` or `managed-tools deny ID` answers one, and `managed-tools "
        "interrupt --session ID` clears a session's; then call it again."
    )
    in_session = int(
        await tx.scalar("SELECT COUNT(*) FROM approvals WHERE session_id = ? AND status = 'pending'", (session_id,))
    )
    if in_session >= caps.per_session:
        raise PendingCapError(
            f"This session has {in_session} permission requests waiting for a person, its cap "
            f"(config.json pendingApprovals.perSession: {caps.per_session}), {clear}"
        )
    of_principal = int(
        await tx.scalar(
            "SELECT COUNT(*) FROM approvals a JOIN sessions s ON s.id = a.session_id WHERE a.status = 'pending' "
            "AND s.owner = (SELECT owner FROM sessions WHERE id = ?)",
            (session_id,),
        )
    )
    if of_principal >= caps.per_principal:
        raise PendingCapError(
            f"Your sessions have {of_principal} permission requests waiting for a person, your cap "
            f"(config.json pendingApprovals.perPrincipal: {caps.per_principal}), {clear}"
        )


async def get(tx: Tx, request_id: str) -> ApprovalRecord:
    row = await tx.fetchone("SELECT * FROM approvals WHERE id = ?", (request_id,))
    if row is None:
        raise NotFoundError(f"No permission request {request_id} exists.")
    return _record(row)


async def find(
    tx: Tx, session_id: str, tool_name: str, args_digest: str, *, status: Status, kind: Kind
) -> ApprovalRecord | None:
    """The oldest request of the session for exactly this tool, kind and arguments, in `status`."""
    row = await tx.fetchone(
        "SELECT * FROM approvals WHERE session_id = ? AND tool_name = ? AND args_digest = ? AND status = ? "
        "AND kind = ? ORDER BY requested_at, id LIMIT 1",
        (session_id, tool_name, args_digest, status, kind),
    )
    return None if row is None else _record(row)


async def decide(
    tx: Tx,
    request_id: str,
    *,
    approved: bool,
    by: str,
    wake_id: str | None = None,
    note: str | None = None,
    reason: str | None = None,
    response: dict[str, Any] | None = None,
    remember: Remember = "once",
) -> ApprovalRecord:
    """Record a person's answer. Only a pending request can be decided, and only once. `remember` session holds
    only for a yes to a tool confirmation."""
    record = await get(tx, request_id)
    if record.status != "pending":
        raise StoreError(f"Permission request {request_id} is already {record.status}; it cannot be decided again.")
    if remember == "session" and not (approved and record.kind == "tool_confirmation"):
        raise StoreError("Only an approval to run a tool can be remembered for the session.")
    status: Status = "approved" if approved else "denied"
    now = utc_now()
    await tx.execute(
        "UPDATE approvals SET status = ?, decided_at = ?, decided_by = ?, note = ?, response = ?, remember = ? "
        "WHERE id = ? AND status = 'pending'",
        (status, now, by, note, None if response is None else json.dumps(response, ensure_ascii=False), remember,
         request_id),
    )  # fmt: skip
    payload: dict[str, Any] = {"requestId": request_id, "toolName": record.tool_name, "allowed": approved, "by": by}
    if remember == "session":
        payload["remember"] = remember
    if note:
        payload["note"] = note
    if reason:
        payload["reason"] = reason
    verdict = "approved" if approved else "denied"
    await events.append_event(
        tx, record.session_id, wake_id, "permission.decided", payload, summary=f"{record.tool_name} {verdict}."
    )
    await _sync_session_status(tx, record.session_id)
    update = {"status": status, "decided_at": now, "decided_by": by, "note": note, "remember": remember}
    return record.model_copy(update=update)


async def consume(tx: Tx, request_id: str, wake_id: str | None) -> bool:
    """Mark an approved request as used; True only for the one caller that flips it (an approval runs once)."""
    changed = await tx.execute(
        "UPDATE approvals SET status = 'consumed', consumed_at = ? WHERE id = ? AND status = 'approved'",
        (utc_now(), request_id),
    )
    if changed != 1:
        return False
    record = await get(tx, request_id)
    await events.append_event(
        tx, record.session_id, wake_id, "permission.consumed", {"requestId": request_id, "toolName": record.tool_name}
    )
    return True


async def remembered(tx: Tx, session_id: str, tool_name: str, args_digest: str) -> ApprovalRecord | None:
    """The session's approval for the rest of the session of exactly this call, once it has run a first time."""
    row = await tx.fetchone(
        "SELECT * FROM approvals WHERE session_id = ? AND tool_name = ? AND args_digest = ? AND status = 'consumed' "
        "AND kind = 'tool_confirmation' AND remember = 'session' ORDER BY requested_at, id LIMIT 1",
        (session_id, tool_name, args_digest),
    )
    return None if row is None else _record(row)


MAX_REMEMBERED_SHOWN = 50


async def remembered_of_tool(tx: Tx, session_id: str, tool_name: str) -> list[ApprovalRecord]:
    """The session's approvals of `tool_name` remembered for the session that bind files (newest first, bounded):
    where a call that asks again looks for the same command approved with other file contents."""
    rows = await tx.fetchall(
        "SELECT * FROM approvals WHERE session_id = ? AND tool_name = ? AND status = 'consumed' "
        "AND kind = 'tool_confirmation' AND remember = 'session' AND binds != '[]' "
        "ORDER BY requested_at DESC, id DESC LIMIT ?",
        (session_id, tool_name, MAX_REMEMBERED_SHOWN),
    )
    return [_record(row) for row in rows]


async def record_unasked(
    tx: Tx,
    session_id: str,
    wake_id: str | None,
    *,
    tool_name: str,
    args_digest: str,
    why: Unasked,
    detail: dict[str, Any],
) -> None:
    """The audit record of a call that would ask and ran without a question, and why."""
    await events.append_event(
        tx,
        session_id,
        wake_id,
        "permission.unasked",
        {"toolName": tool_name, "argsDigest": args_digest, "why": why, **detail},
        summary=f"{tool_name} ran unasked ({why.replace('_', ' ')}).",
    )


async def list_open(tx: Tx, session_id: str | None = None) -> list[ApprovalRecord]:
    """Requests still waiting for a person (pending) or for the model's retry (approved), oldest first."""
    sql = "SELECT * FROM approvals WHERE status IN ('pending', 'approved')"
    params: tuple[str, ...] = ()
    if session_id is not None:
        sql += " AND session_id = ?"
        params = (session_id,)
    return [_record(row) for row in await tx.fetchall(sql + " ORDER BY requested_at, id", params)]


async def interrupt(tx: Tx, session_id: str, *, by: str, note: str | None = None) -> int:
    """Clear every open request of the session; the session is idle again. Returns how many were cleared."""
    cleared = await tx.execute(
        "UPDATE approvals SET status = 'cleared', decided_at = ?, decided_by = ?, note = ? "
        "WHERE session_id = ? AND status IN ('pending', 'approved')",
        (utc_now(), by, note, session_id),
    )
    # What a person remembered for the session ends with the interrupt too: the next call asks again.
    await tx.execute(
        "UPDATE approvals SET remember = 'once' WHERE session_id = ? AND remember = 'session'", (session_id,)
    )
    suffix = f": {note}" if note else ""
    await events.append_event(
        tx,
        session_id,
        None,
        "session.interrupted",
        {"cleared": cleared, "by": by, **({"note": note} if note else {})},
        summary=f"User interrupted prior blocked work{suffix}",
    )
    await _sync_session_status(tx, session_id)
    return cleared
