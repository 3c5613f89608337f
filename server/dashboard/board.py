"""One dashboard: its capabilities (the URL token, the CSRF token), and its answers to permission requests,
each bound to its request and taken once (server/consent/bound_answers.py)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from managed_tools.server.consent.bound_answers import Answered, BoundAnswers, Decision
from managed_tools.server.consent.human import client_attached, question
from managed_tools.stores import approvals, sessions
from managed_tools.stores.approvals import ApprovalRecord
from managed_tools.stores.db import Database, Tx

BY = "dashboard"


@dataclass(eq=False)
class Dashboard:
    db: Database
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    answers: BoundAnswers = field(default_factory=lambda: BoundAnswers(BY))
    where: str = ""  # which state it shows, for the page's header
    authority: str = ""  # "127.0.0.1:PORT", once served

    @property
    def origin(self) -> str:
        return f"http://{self.authority}"

    @property
    def url(self) -> str:
        return f"{self.origin}/d/{self.token}/"

    async def answer(self, request_id: str, token: str, decision: Decision) -> Answered:
        async with self.db.write() as tx:
            return await self.answers.answer(tx, request_id, token, decision)


async def pending_views(tx: Tx, answer_token: Callable[[ApprovalRecord], str]) -> list[dict[str, Any]]:
    """The requests waiting for a person, each with exactly what it runs, its answer token, and whether a client
    is attached to wait for the answer: those first (oldest first), then the orphaned ones (their client left; the
    model sees an answer only if it comes back), as `managed-tools pending` orders them."""
    records = [r for r in await approvals.list_open(tx) if r.status == "pending"]
    attendance = await sessions.attendance(tx, {r.session_id for r in records})
    local = tx.dialect.name == "sqlite"  # a PostgreSQL state's servers run elsewhere: an open wake is believed
    attached = {r.id: client_attached(attendance.get(r.session_id), local=local) for r in records}
    records.sort(key=lambda r: not attached[r.id])  # stable: oldest first within each group
    return [
        {
            "id": r.id,
            "tool": r.tool_name,
            "session": r.session_id,
            "kind": r.kind,
            "channel": r.channel,
            "requestedAt": r.requested_at,
            "question": question(r),
            "answerToken": answer_token(r),
            "clientAttached": attached[r.id],
            "lastActivityAt": seen.last_activity_at if (seen := attendance.get(r.session_id)) else None,
        }
        for r in records
    ]
