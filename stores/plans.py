"""The planning suite's state: one plan per session, steps whose ids increase and are never reused."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from managed_tools.stores.db import Tx, as_dict
from managed_tools.stores.errors import NotFoundError
from managed_tools.stores.ids import utc_now

StepStatus = Literal["pending", "in_progress", "done"]
PlanStatus = Literal["active", "completed"]


class Step(BaseModel):
    step_id: int
    title: str
    status: StepStatus


class Plan(BaseModel):
    objective: str
    status: PlanStatus
    steps: list[Step]
    updated_at: str


async def read(tx: Tx, session_id: str) -> Plan:
    row = await tx.fetchone("SELECT * FROM plans WHERE session_id = ?", (session_id,))
    if row is None:
        raise NotFoundError("This session has no plan yet; create one with planning_setup_plan first.")
    steps = await tx.fetchall(
        "SELECT step_id, title, status FROM plan_steps WHERE session_id = ? ORDER BY step_id", (session_id,)
    )
    return Plan(
        objective=row["objective"],
        status=row["status"],
        steps=[Step(**as_dict(s)) for s in steps],
        updated_at=row["updated_at"],
    )


async def setup(tx: Tx, session_id: str, objective: str, titles: list[str]) -> Plan:
    """Create or replace the plan. Step ids keep counting from the session's previous plan, never reused."""
    row = await tx.fetchone("SELECT next_step_id FROM plans WHERE session_id = ?", (session_id,))
    next_id = 1 if row is None else int(row["next_step_id"])
    await tx.execute("DELETE FROM plan_steps WHERE session_id = ?", (session_id,))
    await tx.execute(
        "INSERT INTO plans (session_id, objective, status, next_step_id, updated_at) VALUES (?, ?, 'active', ?, ?) "
        "ON CONFLICT(session_id) DO UPDATE SET objective = excluded.objective, status = 'active', "
        "updated_at = excluded.updated_at",
        (session_id, objective, next_id, utc_now()),
    )
    await add_steps(tx, session_id, titles)
    return await read(tx, session_id)


async def add_steps(tx: Tx, session_id: str, titles: list[str]) -> list[int]:
    await read(tx, session_id)  # refuses when there is no plan
    ids: list[int] = []
    for title in titles:
        step_id = int(
            await tx.scalar(
                "UPDATE plans SET next_step_id = next_step_id + 1 WHERE session_id = ? RETURNING next_step_id - 1",
                (session_id,),
            )
        )
        await tx.execute(
            "INSERT INTO plan_steps (session_id, step_id, title, status) VALUES (?, ?, ?, 'pending')",
            (session_id, step_id, title),
        )
        ids.append(step_id)
    await _sync_status(tx, session_id)
    return ids


async def update_step(tx: Tx, session_id: str, step_id: int, *, title: str | None, status: StepStatus | None) -> Plan:
    await read(tx, session_id)
    exists = await tx.scalar("SELECT 1 FROM plan_steps WHERE session_id = ? AND step_id = ?", (session_id, step_id))
    if not exists:
        raise NotFoundError(f"The plan has no step {step_id}; planning_read_plan lists the steps.")
    if title is not None:
        await tx.execute(
            "UPDATE plan_steps SET title = ? WHERE session_id = ? AND step_id = ?", (title, session_id, step_id)
        )
    if status is not None:
        await tx.execute(
            "UPDATE plan_steps SET status = ? WHERE session_id = ? AND step_id = ?", (status, session_id, step_id)
        )
    await _sync_status(tx, session_id)
    return await read(tx, session_id)


async def _sync_status(tx: Tx, session_id: str) -> None:
    """All steps done means the plan is completed; reopening a step makes it active again."""
    await tx.execute(
        "UPDATE plans SET updated_at = ?, status = CASE WHEN EXISTS (SELECT 1 FROM plan_steps WHERE session_id = ?) "
        "AND NOT EXISTS (SELECT 1 FROM plan_steps WHERE session_id = ? AND status != 'done') "
        "THEN 'completed' ELSE 'active' END WHERE session_id = ?",
        (utc_now(), session_id, session_id, session_id),
    )
