"""Who is calling, and what their scopes let them use.

Over stdio or with the static token there is one principal, the local one, and it may use everything. With OAuth
(server/auth/oauth.py) each request carries an access token naming a principal (its issuer and subject) and its scopes:

- `tools:read`: list and call the read-only tools (the others are unknown to it);
- `tools:write`: every tool;
- `approvals`: answer the permission questions of its own calls in the client (elicitation, or the 2026-07-28
  input-required round); without it a paused call waits for `managed-tools approve` on the server.

Everything a principal creates is bound to it through the sessions it owns (stores/sessions.py `owner`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

from mcp.server.auth.middleware.auth_context import get_access_token

from managed_tools.stores.sessions import LOCAL_OWNER
from managed_tools.tools.framework.definitions.definition import ToolDefinition

TOOLS_READ = "tools:read"
TOOLS_WRITE = "tools:write"
APPROVALS = "approvals"
SCOPES = (TOOLS_READ, TOOLS_WRITE, APPROVALS)
View = Literal["all", "read_only", "none"]


@dataclass(frozen=True)
class Principal:
    owner: str  # what its sessions record (LOCAL_OWNER, or `owner_of` its issuer and subject)
    scopes: frozenset[str] | None  # None: the local principal, unrestricted

    @property
    def view(self) -> View:
        """Which tools the principal sees: all of them, the read-only ones, or none. Principals of one view see the
        same tools/list, which is built once per view (server/publishing/listing.py)."""
        if self.scopes is None or TOOLS_WRITE in self.scopes:
            return "all"
        return "read_only" if TOOLS_READ in self.scopes else "none"

    def may_use(self, definition: ToolDefinition) -> bool:
        """The one predicate on the principal for listing and calling a tool (composed with the server's toolsets)."""
        view = self.view
        return view == "all" or (view == "read_only" and definition.read_only)

    @property
    def answers_approvals(self) -> bool:
        return self.scopes is None or APPROVALS in self.scopes


LOCAL = Principal(LOCAL_OWNER, None)


def owner_of(issuer: str, subject: str) -> str:
    """A fixed-size owner key for an OAuth principal: a subject is unique only within its issuer, and neither is
    kept readable in every session row and event-index token."""
    digest = hashlib.sha256(json.dumps([issuer, subject]).encode()).hexdigest()
    return f"oauth:{digest[:32]}"


def current_principal() -> Principal:
    """The principal of the request being handled: the SDK's auth middleware puts the verified token in a context
    variable that reaches the handler. No token means the local principal: with OAuth on, no request without a
    valid token gets this far (server/auth/oauth.py)."""
    token = get_access_token()
    if token is None:
        return LOCAL
    issuer = (token.claims or {}).get("iss")
    return Principal(owner_of(str(issuer), str(token.subject)), frozenset(token.scopes))
