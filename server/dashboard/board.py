"""One dashboard: its capabilities (the URL token, the CSRF token), and its answers to permission requests,
each bound to its request and taken once (server/consent/bound_answers.py)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from managed_tools.server.consent.bound_answers import Answered, BoundAnswers, Decision
from managed_tools.server.consent.human import question
from managed_tools.stores import approvals
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
    """The requests waiting for a person, oldest first, each with exactly what it runs and its answer token."""
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
        }
        for r in await approvals.list_open(tx)
        if r.status == "pending"
    ]
