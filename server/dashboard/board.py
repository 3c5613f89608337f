"""One dashboard: its capabilities, and how a person's answer to a permission request is taken there.

An answer is bound to one request and its exact arguments: the page shows each pending request with an answer
token, an HMAC (under a key only this dashboard holds) of the request id and its argument digest, and the answer
must carry it back. It is single-use because the store decides only a pending request (stores/approvals.py
`decide`), and the waiting call consumes an approval once, whichever process it runs in (server/consent.py).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from managed_tools.server.human import question
from managed_tools.stores import approvals
from managed_tools.stores.approvals import ApprovalRecord
from managed_tools.stores.db import Database, Tx
from managed_tools.stores.errors import NotFoundError

BY = "dashboard"
Decision = Literal["approve", "approve-session", "deny"]


@dataclass(frozen=True)
class Answered:
    status: int  # the HTTP status that says it
    ok: bool
    message: str


@dataclass(eq=False)
class Dashboard:
    db: Database
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    where: str = ""  # which state it shows, for the page's header
    authority: str = ""  # "127.0.0.1:PORT", once served

    @property
    def origin(self) -> str:
        return f"http://{self.authority}"

    @property
    def url(self) -> str:
        return f"{self.origin}/d/{self.token}/"

    def answer_token(self, record: ApprovalRecord) -> str:
        message = f"{record.id}\0{record.tool_name}\0{record.args_digest}".encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    async def answer(self, request_id: str, token: str, decision: Decision) -> Answered:
        """Decide the request if `token` is the one shown for exactly it and it still waits for a person."""
        async with self.db.write() as tx:
            try:
                record = await approvals.get(tx, request_id)
            except NotFoundError:
                return Answered(404, False, "There is no such request.")
            if not hmac.compare_digest(token.encode(), self.answer_token(record).encode()):
                return Answered(403, False, "This answer is not for this request.")
            if record.status != "pending":
                return Answered(410, False, f"This request is {record.status} already; an answer works once.")
            if record.kind != "tool_confirmation":
                return Answered(400, False, "This request asks for a tool's result: use `managed-tools respond`.")
            approve = decision != "deny"
            await approvals.decide(
                tx, request_id, approved=approve, by=BY, remember="session" if decision == "approve-session" else "once"
            )
        verb = "Approved" if approve else "Denied"
        return Answered(200, True, f"{verb} {record.tool_name}.")


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
