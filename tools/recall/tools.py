"""The recall family's tools, in publishing order."""

from __future__ import annotations

from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.recall.events import (
    ContextSearchArgs,
    ContextSearchOutput,
    RecallArgs,
    TraceSearchOutput,
    session_search_context,
    session_search_traces,
)
from managed_tools.tools.recall.merge import RetrievalArgs, RetrievalOutput, retrieval_search

DEFINITIONS = (
    ToolDefinition(
        name="session_search_context",
        title="Search other sessions' events",
        description="Search this agent's other sessions' events (calls, results, outcomes, "
        "decisions); each hit says why it matched and which trace to read.",
        input_model=ContextSearchArgs,
        output_model=ContextSearchOutput,
        handler=session_search_context,
        effects=("session_read",),
        examples=(
            ToolExample(description="Where a file was last changed", input={"query": "src/app.py edit"}),
            ToolExample(
                description="Denied permissions in child sessions",
                input={"query": "denied", "lineage": "children", "types": ["permission.decided"]},
            ),
        ),
    ),
    ToolDefinition(
        name="session_search_traces",
        title="Search other sessions' traces",
        description="Search this agent's other sessions: one hit per wake whose events match, with"
        " event count, types and latest summary.",
        input_model=RecallArgs,
        output_model=TraceSearchOutput,
        handler=session_search_traces,
        effects=("session_read",),
        examples=(ToolExample(description="The wake that ran the migrations", input={"query": "migrate database"}),),
    ),
    ToolDefinition(
        name="retrieval_search",
        title="Search everything recalled",
        description="Search memory, other sessions' events and traces at once: merged hits with evidence, a "
        "summary per backend and what to read next.",
        input_model=RetrievalArgs,
        output_model=RetrievalOutput,
        handler=retrieval_search,
        effects=("session_read", "memory_read", "learning_read"),
        examples=(
            ToolExample(
                description="Only the event backends",
                input={"query": '"release notes"', "backends": ["session_context", "session_trace"]},
            ),
        ),
    ),
)
