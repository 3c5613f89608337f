"""A person's answer to a permission request given outside the client's own question (the dashboard, an MCP Apps
approval card), taken the one way both share.

An answer is bound to one request and its exact call: the place that shows the request also shows an answer token,
an HMAC (under a key only this process holds, never stored) of the request id, the tool and the argument digest,
and the answer must carry it back. It is single-use because the store decides only a pending request
(stores/approvals.py `decide`), and the paused call consumes an approval once, whichever process it runs in
(server/consent/consent.py).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Literal

from managed_tools.stores import approvals
from managed_tools.stores.approvals import ApprovalRecord
from managed_tools.stores.db import Tx
from managed_tools.stores.errors import NotFoundError

Decision = Literal["approve", "approve-session", "deny"]


@dataclass(frozen=True)
class Answered:
    status: int  # the HTTP status that says it
    ok: bool
    message: str


class BoundAnswers:
    """Answer tokens for the requests one place shows, and the answers they allow, recorded as given `by` it."""

    def __init__(self, by: str) -> None:
        self.by = by
        self._key = secrets.token_bytes(32)

    def token(self, record: ApprovalRecord) -> str:
        message = f"{record.id}\0{record.tool_name}\0{record.args_digest}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    async def answer(
        self, tx: Tx, request_id: str, token: str, decision: Decision, *, session_id: str | None = None
    ) -> Answered:
        """Decide the request if `token` is the one shown for exactly it (and, given `session_id`, it is of that
        session) and it still waits for a person."""
        try:
            record = await approvals.get(tx, request_id)
        except NotFoundError:
            return Answered(404, False, "There is no such request.")
        if not hmac.compare_digest(token.encode(), self.token(record).encode()) or (
            session_id is not None and record.session_id != session_id
        ):
            return Answered(403, False, "This answer is not for this request.")
        if record.status != "pending":
            return Answered(410, False, f"This request is {record.status} already; an answer works once.")
        if record.kind != "tool_confirmation":
            return Answered(400, False, "This request asks for a tool's result: use `managed-tools respond`.")
        approve = decision != "deny"
        remember: approvals.Remember = "session" if decision == "approve-session" else "once"
        await approvals.decide(tx, request_id, approved=approve, by=self.by, remember=remember)
        return Answered(200, True, f"{'Approved' if approve else 'Denied'} {record.tool_name}.")
