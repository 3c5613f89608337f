"""What a tool call comes to: its result (what the server turns into a CallToolResult), and the refusal that
stops a call on its way through the executor (tools/framework/calls/executor.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from managed_tools.tools.framework.wire.content import Block, ResourceBlock, TextBlock

Status = Literal["success", "error", "blocked", "cancelled"]
ErrorKind = Literal[
    "unknown_tool",
    "invalid_arguments",
    "deadline",
    "permission",
    "input_required",
    "requires_action",
    "handed_back",
    "budget",
    "tool_error",
    "refused",
    "conflict",
    "timeout",
    "busy",
    "state_gone",
    "state_unavailable",
    "disk_full",
    "state_read_only",
    "state_damaged",
    "quota_exceeded",
    "sandbox_refused",
    "internal",
]


@dataclass(frozen=True)
class CallResult:
    """What the server turns into a CallToolResult: structured output on success, a message otherwise.

    `content` holds the blocks to show (a tool's `render`, or the text plus attached blocks); without them the
    model sees `text`. `touched` lists the resources the call changed."""

    status: Status
    text: str
    structured: dict[str, Any] | None = None
    content: tuple[Block, ...] = ()
    error_kind: ErrorKind | None = None
    action_required: dict[str, Any] | None = None
    touched: tuple[str, ...] = ()
    # The kinds of credential the secret scan masked in this result (never their values): audited.
    secrets_found: tuple[str, ...] = ()
    # The result fields kept from the model (ToolDefinition.context_excluded): for the person and the audit only.
    withheld: dict[str, Any] | None = None

    @property
    def is_error(self) -> bool:
        return self.status != "success"

    def visible_chars(self) -> int:
        """The characters this result puts into the conversation (session_describe_context adds them up): its
        text, or the text of the blocks shown instead; binary blocks are left out (their cost is the client's)."""
        if not self.content:
            return len(self.text)
        return sum(len(block.text or "") for block in self.content if isinstance(block, TextBlock | ResourceBlock))


class Refusal(Exception):
    def __init__(
        self, kind: ErrorKind, message: str, status: Status = "error", action: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.action = action
