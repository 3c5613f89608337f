"""Budgets (seed 002's `ToolContext.budget_tracker`, seed 001 §7's execution state): tokens, time and calls, per
call and per session, as configured in config.json `budgets`; nothing is limited unless configured.

What counts, per call: its time (the span's duration), and its tokens: the arguments and the result as the model
sees them (characters / 4, the estimate `session_describe_context` uses) plus what a model spent for the call (a
prompt run on a provider charges its tokens here). A session's use is the sum over its recorded calls and those
of the sessions it delegated (stores/usage.py), kept across connections and processes; a child's calls count
against every ancestor's per-session limits. The executor enforces the limits: a session over one of
its limits has its next calls refused before anything runs; a call whose time runs out is stopped; a call whose
tokens go over is refused and its transaction undone. Every such refusal is `blocked` with the kind `budget`, a
refusal by design (not failed work for the outcome gate), and is itself not counted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from managed_tools.stores.usage import Usage

TOKEN_CHARS = 4  # the usual estimate: a token is about four characters of English or JSON
Tokens = Annotated[int | None, Field(ge=1, le=1 << 40)]
Seconds = Annotated[float | None, Field(gt=0, le=366 * 24 * 3600)]
Calls = Annotated[int | None, Field(ge=1, le=1 << 40)]


def estimated_tokens(chars: int) -> int:
    return -(-chars // TOKEN_CHARS)


class _Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CallLimits(_Limits):
    tokens: Tokens = None
    seconds: Seconds = None


class SessionLimits(_Limits):
    calls: Calls = None
    tokens: Tokens = None
    seconds: Seconds = None


class Budgets(_Limits):
    """config.json `budgets`: `{"perCall": {"tokens", "seconds"}, "perSession": {"calls", "tokens", "seconds"}}`."""

    per_call: CallLimits = Field(default_factory=CallLimits, alias="perCall")
    per_session: SessionLimits = Field(default_factory=SessionLimits, alias="perSession")

    @property
    def configured(self) -> bool:
        return self != NO_BUDGETS


# Built once: every call without configured budgets compares against them, and its tracker starts from them.
NO_BUDGETS = Budgets()
NOTHING_USED = Usage()  # never written to: a session's use is read into a new Usage (stores/usage.py)


class BudgetExceededError(Exception):
    """A call went over its budget: the executor turns it into a `budget` refusal."""


def session_over(limits: SessionLimits, used: Usage) -> str | None:
    """Which of the session's limits its use has reached, said for the model and the person; None if none."""
    reached = [
        f"{what} {spent} of {limit}"
        for what, spent, limit in (
            ("calls", used.calls, limits.calls),
            ("tokens", used.tokens, limits.tokens),
            ("seconds", round(used.seconds, 1), limits.seconds),
        )
        if limit is not None and spent >= limit
    ]
    return "; ".join(reached) or None


@dataclass
class BudgetTracker:
    """One call's budget, on its context (`ctx.budget`): the limits, what the session had used when the call
    began (the most along it and its ancestors: `shared` when it has one, whose budget it spends too), and what a
    model has spent for this call so far."""

    budgets: Budgets
    used_before: Usage
    model_tokens: int = 0
    shared: bool = False

    def tokens_left(self) -> int | None:
        """The tokens a model may still spend for this call (the tighter of the call's and the session's), None
        when neither is limited."""
        left = [
            limit - spent
            for limit, spent in (
                (self.budgets.per_call.tokens, self.model_tokens),
                (self.budgets.per_session.tokens, self.used_before.tokens + self.model_tokens),
            )
            if limit is not None
        ]
        return min(left) if left else None

    def charge(self, tokens: int) -> None:
        """Count tokens a model spent for this call; over the budget, the call is refused (and undone)."""
        self.model_tokens += max(tokens, 0)
        left = self.tokens_left()
        if left is not None and left < 0:
            spent = self.model_tokens
            raise BudgetExceededError(f"a model spent {spent} tokens for this call, {-left} over its budget")

    def check_call(self, visible_chars: int) -> None:
        """The call's own tokens (its arguments and result as shown, and the model's) against the per-call limit."""
        limit = self.budgets.per_call.tokens
        spent = estimated_tokens(visible_chars) + self.model_tokens
        if limit is not None and spent > limit:
            raise BudgetExceededError(f"its result would take about {spent} tokens, over the per-call limit of {limit}")


def unlimited() -> BudgetTracker:
    return BudgetTracker(NO_BUDGETS, NOTHING_USED)
