"""`session_describe_context`: the MCP reading of the reference's context budget (§2a).

The server never sees the client's prompt, so the budget is what it knows it put there: the catalogue the client
was given (from the setup contract recorded at attach) and the results of this wake's calls (sizes recorded on
each `span.completed`). Pressure is judged against a nominal window, since the real one is the client's secret."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from managed_tools.stores import setups
from managed_tools.stores.setups import ResultSize
from managed_tools.tools.environment.setup import recorded_setup
from managed_tools.tools.framework.context.budget import estimated_tokens
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import scoped_session
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments, SessionId, WireModel

TOP = 5
# A nominal 128k-token window: a quarter of it used is worth a look, three quarters is pressing.
MODERATE_TOKENS = 32_000
HIGH_TOKENS = 96_000
LARGE_RESULT_TOKENS = 8_000  # one result this big crowds the conversation whatever the window
LARGE_CATALOGUE_TOKENS = 16_000
# Narrower rereads for the tools whose results grew large (only those the catalogue has are recommended).
NARROWER = {
    "read": ("grep", "glob"),
    "bash": ("grep", "shell_history"),
    "shell_run": ("shell_history", "grep"),
    "shell_exec": ("shell_history", "grep"),
    "sandbox_execute": ("shell_history", "grep"),
    "shell_read_command": ("shell_history",),
    "shell_read_last_output": ("shell_history",),
    "shell_wait": ("shell_history",),
    "session_get_events": ("session_list_traces", "session_search_traces"),
    "session_get_trace": ("session_list_traces", "session_search_traces"),
    "memory_read": ("memory_search",),
    "memory_read_version": ("memory_list_versions", "memory_search"),
    "agent_describe_setup": ("agent_compare_setup",),
    "resources_compare_with_substrate": ("resources_list_staged_drafts",),
}
RECALL = ("session_search_context", "retrieval_search", "memory_search", "session_get_snapshot")


class ContextInput(Arguments):
    session_id: SessionId | None = None


class SchemaSize(WireModel):
    name: str
    chars: int
    estimated_tokens: int


class CatalogueBudget(WireModel):
    tool_count: int
    chars: int = Field(description="Name, description and input schema of every tool, as compact JSON.")
    estimated_tokens: int
    top_schemas: list[SchemaSize]


class ResultView(WireModel):
    event_id: str
    tool_name: str
    created_at: str
    chars: int
    estimated_tokens: int


class ResultsBudget(WireModel):
    count: int
    chars: int
    estimated_tokens: int
    largest: list[ResultView]


class ContextBudget(WireModel):
    wake_id: str
    setup_fingerprint: str | None
    catalogue: CatalogueBudget | None = Field(description="null when the wake's setup contract was not recorded.")
    results: ResultsBudget
    estimated_tokens: int = Field(description="Catalogue and results together.")
    nominal_window_tokens: int


class Pressure(WireModel):
    level: Literal["low", "moderate", "high"]
    reasons: list[str]
    recommended_tools: list[str]


class DescribeContextOutput(WireModel):
    session_id: str
    available: bool
    context_budget: ContextBudget | None
    pressure: Pressure | None
    reason: str | None


def _result(size: ResultSize) -> ResultView:
    return ResultView(**size.model_dump(), estimated_tokens=estimated_tokens(size.chars))


def pressure(budget: ContextBudget, known: set[str]) -> Pressure:
    reasons: list[str] = []
    recommended: list[str] = []
    level = 0
    if budget.estimated_tokens >= HIGH_TOKENS:
        level = 2
        reasons.append(f"high_usage:{budget.estimated_tokens}")
    elif budget.estimated_tokens >= MODERATE_TOKENS:
        level = 1
        reasons.append(f"moderate_usage:{budget.estimated_tokens}")
    if level:
        recommended.extend(RECALL)
    for result in budget.results.largest:
        if result.estimated_tokens >= LARGE_RESULT_TOKENS:
            level = max(level, 1)
            reasons.append(f"large_result:{result.tool_name}:{result.estimated_tokens}")
            recommended.extend(NARROWER.get(result.tool_name, RECALL[:2]))
    if budget.catalogue is not None and budget.catalogue.estimated_tokens >= LARGE_CATALOGUE_TOKENS:
        level = max(level, 1)
        reasons.append(f"large_catalogue:{budget.catalogue.estimated_tokens}")
    names = [n for n in dict.fromkeys(recommended) if n in known]
    return Pressure(level=("low", "moderate", "high")[level], reasons=reasons, recommended_tools=names)


async def session_describe_context(ctx: ToolContext, args: ContextInput) -> DescribeContextOutput:
    session = await scoped_session(ctx, args.session_id)
    found = await recorded_setup(ctx, session.id)
    if found.wake_id is None:
        return DescribeContextOutput(
            session_id=session.id, available=False, context_budget=None, pressure=None, reason=found.reason
        )
    catalogue = None
    if found.setup is not None:
        tools = found.setup.tools
        top = sorted(tools.tools, key=lambda t: t.model_visible_chars, reverse=True)[:TOP]
        catalogue = CatalogueBudget(
            tool_count=tools.count,
            chars=tools.model_visible_chars,
            estimated_tokens=estimated_tokens(tools.model_visible_chars),
            top_schemas=[
                SchemaSize(name=t.name, chars=t.model_visible_chars,
                           estimated_tokens=estimated_tokens(t.model_visible_chars)) for t in top
            ],
        )  # fmt: skip
    results = await setups.wake_results(ctx.tx, found.wake_id, TOP)
    spent = ResultsBudget(
        count=results.count,
        chars=results.chars,
        estimated_tokens=estimated_tokens(results.chars),
        largest=[_result(r) for r in results.largest],
    )
    budget = ContextBudget(
        wake_id=found.wake_id,
        setup_fingerprint=found.fingerprint,
        catalogue=catalogue,
        results=spent,
        estimated_tokens=spent.estimated_tokens + (0 if catalogue is None else catalogue.estimated_tokens),
        nominal_window_tokens=128_000,
    )
    return DescribeContextOutput(
        session_id=session.id,
        available=True,
        context_budget=budget,
        pressure=pressure(budget, set(ctx.runtime.registry.names())),
        reason=found.reason,
    )


DEFINITIONS = (
    ToolDefinition(
        name="session_describe_context",
        title="Describe the context budget",
        description="Estimate what a session's wake put into the conversation and the pressure, with narrower tools.",
        input_model=ContextInput,
        output_model=DescribeContextOutput,
        handler=session_describe_context,
        effects=("session_read",),
    ),
)
