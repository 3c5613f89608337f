"""Tasks: long tool calls a client follows by id (server/mcp/tasks.py speaks the protocol; this keeps them).

A task is written before its id is handed out and every change is one UPDATE, so `tasks/get` answers the same
from any process sharing the store. Terminal states (completed, failed, cancelled) never change again. A task
belongs to its session, and so to that session's principal.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Literal

from pydantic import BaseModel

from managed_tools.stores.db import Row, Tx, as_dict, insert
from managed_tools.stores.errors import AccessDeniedError
from managed_tools.stores.ids import utc_now

TaskStatus = Literal["working", "completed", "failed", "cancelled"]  # the extension's, but input_required
TERMINAL: tuple[TaskStatus, ...] = ("completed", "failed", "cancelled")
MAX_MESSAGE_CHARS = 500


class TaskRecord(BaseModel):
    id: str
    session_id: str
    tool_name: str
    status: TaskStatus
    status_message: str | None
    reply: dict[str, Any] | None  # the CallToolResult, once completed
    error: dict[str, Any] | None  # the JSON-RPC error, once failed
    ttl_ms: int
    created_at: str
    updated_at: str

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


_JSON = ("reply", "error")


def _record(row: Row) -> TaskRecord:
    found = {key: value for key, value in as_dict(row).items() if key in TaskRecord.model_fields}
    for key in _JSON:
        found[key] = None if found[key] is None else json.loads(found[key])
    return TaskRecord(**found)


def _text(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def create(tx: Tx, session_id: str, *, tool_name: str, status_message: str | None, ttl_ms: int) -> TaskRecord:
    now = utc_now()
    record = TaskRecord(
        id=secrets.token_hex(16),  # a handle: unguessable, and owner-bound besides
        session_id=session_id,
        tool_name=tool_name,
        status="working",
        status_message=status_message,
        reply=None,
        error=None,
        ttl_ms=ttl_ms,
        created_at=now,
        updated_at=now,
    )
    await insert(tx, "tasks", record)  # reply and error are None until it ends
    return record


async def get(tx: Tx, task_id: str) -> TaskRecord | None:
    row = await tx.fetchone("SELECT * FROM tasks WHERE id = ?", (task_id,))
    return None if row is None else _record(row)


async def get_owned(tx: Tx, task_id: str, agent_id: str, *, owner: str) -> TaskRecord:
    """The task, only if its session belongs to `agent_id` and `owner` (the same answer whether it exists or not)."""
    row = await tx.fetchone(
        "SELECT t.*, s.agent_id AS session_agent, s.owner AS session_owner FROM tasks t "
        "JOIN sessions s ON s.id = t.session_id WHERE t.id = ?",
        (task_id,),
    )
    if row is None or row["session_agent"] != agent_id or row["session_owner"] != owner:
        raise AccessDeniedError(f"Task {task_id} is not available to this principal.")
    return _record(row)


async def update(
    tx: Tx,
    task_id: str,
    status: TaskStatus,
    *,
    message: str | None = None,
    reply: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> bool:
    """Move a task that is not yet terminal to `status`; False if it already ended (a cancel won the race)."""
    changed = await tx.execute(
        "UPDATE tasks SET status = ?, status_message = ?, reply = ?, error = ?, updated_at = ? "
        "WHERE id = ? AND status NOT IN ('completed','failed','cancelled')",
        (status, None if message is None else message[:MAX_MESSAGE_CHARS], _text(reply), _text(error), utc_now(),
         task_id),
    )  # fmt: skip
    return changed == 1
