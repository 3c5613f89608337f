"""Outcomes: the session's active outcome (the latest defined) and its capped evaluation history."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from pydantic import BaseModel

from managed_tools.stores import search
from managed_tools.stores.db import Tx
from managed_tools.stores.ids import canonical_json, sha256_hex, utc_now, uuid7

HISTORY_CAP = 12


class Outcome(BaseModel):
    id: str
    title: str
    detail: str | None
    success_criteria: list[str]
    fingerprint: str
    defined_at: str


class EvaluationRecord(BaseModel):
    id: str
    evaluated_at: str
    wake_id: str | None
    iteration: int
    outcome_title: str
    outcome_fingerprint: str
    grade_status: str
    evaluation: dict[str, Any]


def fingerprint(title: str, detail: str | None, criteria: list[str]) -> str:
    return sha256_hex(canonical_json({"title": title, "detail": detail, "successCriteria": criteria}))


async def define(
    tx: Tx, *, session_id: str, agent_id: str, title: str, detail: str | None, criteria: list[str]
) -> Outcome:
    outcome = Outcome(
        id=uuid7(),
        title=title,
        detail=detail,
        success_criteria=criteria,
        fingerprint=fingerprint(title, detail, criteria),
        defined_at=utc_now(),
    )
    await tx.execute(
        "INSERT INTO outcomes (id, session_id, title, detail, criteria, fingerprint, defined_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (outcome.id, session_id, title, detail, json.dumps(criteria), outcome.fingerprint, outcome.defined_at),
    )
    await search.upsert(
        tx,
        key=f"outcome:{session_id}",
        source="session_outcome",
        agent_id=agent_id,
        session_id=session_id,
        title=f"outcome: {title}",
        body="\n".join([title, detail or "", *criteria]),
    )
    return outcome


async def active(tx: Tx, session_id: str) -> Outcome | None:
    row = await tx.fetchone(
        "SELECT * FROM outcomes WHERE session_id = ? ORDER BY defined_at DESC, id DESC LIMIT 1", (session_id,)
    )
    return None if row is None else _outcome(row)


def _outcome(row: Any) -> Outcome:
    return Outcome(
        id=row["id"],
        title=row["title"],
        detail=row["detail"],
        success_criteria=json.loads(row["criteria"]),
        fingerprint=row["fingerprint"],
        defined_at=row["defined_at"],
    )


async def _latest_rows(tx: Tx, table: str, order: str, session_ids: Collection[str]) -> list[Any]:
    """The newest row of `table` (by `order`, then id) for each named session that has one, in one query."""
    if not session_ids:
        return []
    marks = ",".join("?" * len(session_ids))
    return await tx.fetchall(
        f"SELECT * FROM {table} t WHERE session_id IN ({marks}) AND id = (SELECT id FROM {table} "
        f"WHERE session_id = t.session_id ORDER BY {order} DESC, id DESC LIMIT 1)",
        list(session_ids),
    )


async def latest_evaluations(tx: Tx, session_ids: Collection[str]) -> dict[str, EvaluationRecord]:
    rows = await _latest_rows(tx, "outcome_evaluations", "evaluated_at", session_ids)
    return {row["session_id"]: _record(row) for row in rows}


async def active_many(tx: Tx, session_ids: Collection[str]) -> dict[str, Outcome]:
    """The active outcome of each named session that has one."""
    rows = await _latest_rows(tx, "outcomes", "defined_at", session_ids)
    return {row["session_id"]: _outcome(row) for row in rows}


def _record(row: Any) -> EvaluationRecord:
    return EvaluationRecord(
        id=row["id"],
        evaluated_at=row["evaluated_at"],
        wake_id=row["wake_id"],
        iteration=row["iteration"],
        outcome_title=row["outcome_title"],
        outcome_fingerprint=row["fingerprint"],
        grade_status=row["grade_status"],
        evaluation=json.loads(row["evaluation"]),
    )


async def history(tx: Tx, session_id: str, limit: int = HISTORY_CAP) -> list[EvaluationRecord]:
    """The last `limit` evaluations, oldest first."""
    rows = await tx.fetchall(
        "SELECT * FROM (SELECT * FROM outcome_evaluations WHERE session_id = ? ORDER BY evaluated_at DESC, id DESC "
        "LIMIT ?) AS h ORDER BY evaluated_at, id",
        (session_id, limit),
    )
    return [_record(row) for row in rows]


async def record_evaluation(
    tx: Tx,
    *,
    session_id: str,
    agent_id: str,
    wake_id: str | None,
    outcome: Outcome,
    grade_status: str,
    evaluation: dict[str, Any],
) -> EvaluationRecord:
    """Append an evaluation (iteration 0-based per outcome fingerprint); the history keeps the last 12.

    A verdict that repeats the last one for the same outcome replaces it instead (the history records changes).
    The reference also replaces within one harness wake; over MCP a wake is a whole connection, so that rule
    would keep a session at one entry, and it is not used.
    """
    past = await history(tx, session_id)
    last = past[-1] if past else None
    same_fingerprint = [r for r in past if r.outcome_fingerprint == outcome.fingerprint]
    verdict = (evaluation.get("status"), evaluation.get("promotion_ready"))
    replaces = (
        last is not None
        and last.outcome_fingerprint == outcome.fingerprint
        and (last.evaluation.get("status"), last.evaluation.get("promotion_ready")) == verdict
    )
    if replaces and last is not None:
        iteration = last.iteration
        await tx.execute("DELETE FROM outcome_evaluations WHERE id = ?", (last.id,))
    else:
        iteration = same_fingerprint[-1].iteration + 1 if same_fingerprint else 0
    entry = EvaluationRecord(
        id=uuid7(),
        evaluated_at=utc_now(),
        wake_id=wake_id,
        iteration=iteration,
        outcome_title=outcome.title,
        outcome_fingerprint=outcome.fingerprint,
        grade_status=grade_status,
        evaluation=evaluation,
    )
    await tx.execute(
        "INSERT INTO outcome_evaluations (id, session_id, wake_id, fingerprint, iteration, evaluated_at, "
        "outcome_title, grade_status, evaluation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            entry.id,
            session_id,
            wake_id,
            outcome.fingerprint,
            iteration,
            entry.evaluated_at,
            outcome.title,
            grade_status,
            json.dumps(evaluation),
        ),
    )
    await tx.execute(
        "DELETE FROM outcome_evaluations WHERE session_id = ? AND id NOT IN (SELECT id FROM outcome_evaluations "
        "WHERE session_id = ? ORDER BY evaluated_at DESC, id DESC LIMIT ?)",
        (session_id, session_id, HISTORY_CAP),
    )
    await search.upsert(
        tx,
        key=f"evaluation:{session_id}",
        source="session_evaluation",
        agent_id=agent_id,
        session_id=session_id,
        title=f"evaluation: {outcome.title}",
        body="\n".join(
            [
                f"status {evaluation.get('status')} confidence {evaluation.get('confidence')}",
                str(evaluation.get("summary", "")),
                *[str(e) for e in evaluation.get("evidence", [])],
            ]
        ),
    )
    return entry
