"""`retrieval_search`: the memory, session_context and session_trace backends merged into one ranked list, with a
per-backend summary and an expansion plan (reference §2e, §3 and retrieval/pipeline). A `vector` backend can be
named but no provider exists here, so it is reported unavailable instead of silently returning nothing."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field

from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.retrieval import setup_aware
from managed_tools.tools.framework.context.scope import Relation
from managed_tools.tools.framework.wire.models import NextTool, WireModel
from managed_tools.tools.memory.search import SearchArgs, memory_search
from managed_tools.tools.outcomes.gate import posture
from managed_tools.tools.recall.events import RecallArgs, context_hits, parse_query, trace_hits
from managed_tools.tools.recall.hits import RecallHit, ranked, session_facts

BackendName = Literal["memory", "session_context", "session_trace", "vector"]
DEFAULT_BACKENDS: tuple[BackendName, ...] = ("memory", "session_context", "session_trace")
NO_VECTOR = "No vector provider is configured on this server; the lexical backends answer alone."
# The reference's plan order for equal support, and the extra weight a step gets while the current outcome is not
# ready for promotion (stalled: its trend is stable or regressing).
TOOL_PRIORITY = [
    "outcome_read", "outcome_history", "outcome_evaluate", "agent_compare_setup", "session_get_snapshot",
    "session_get_trace", "memory_read", "shell_describe", "shell_read_last_output", "shell_history",
    "session_get_events", "learning_list",
]  # fmt: skip
URGENCY = {"outcome_read": 1, "agent_compare_setup": 1, "session_get_snapshot": 1, "session_get_trace": 1}


class RetrievalArgs(RecallArgs):
    backends: (
        Annotated[
            list[BackendName],
            Field(max_length=4, description="Default: all three."),
        ]
        | None
    ) = None


class Evidence(WireModel):
    backend: str
    source: str
    score: float
    reasons: list[str]
    setup_match: bool | None
    session_relation: Relation | None


class MergedHit(RecallHit):
    confidence: Literal["low", "medium", "high"]
    evidence: list[Evidence]


class BackendSummary(WireModel):
    backend: BackendName
    available: bool
    count: int
    top_score: float | None
    note: str | None


class PlanStep(NextTool):
    support_count: int
    candidate_titles: list[str]


class RetrievalOutput(WireModel):
    agent_id: str
    query: str
    count: int
    backend_summary: list[BackendSummary]
    expansion_plan: list[PlanStep]
    hits: list[MergedHit]


async def _memory_hits(ctx: ToolContext, args: RecallArgs) -> list[RecallHit]:
    """memory_search's hits, with the same session facts as the event backends (relation, setup match, posture)."""
    query = {"query": args.query, "limit": args.limit, "lineage": args.lineage}
    found = await memory_search(ctx, SearchArgs.model_validate(query))
    facts = await session_facts(ctx, {h.session_id for h in found.hits if h.session_id is not None})
    hits: list[RecallHit] = []
    for hit in found.hits:
        fields = {
            "setup_match": None,
            "session_relation": None,
            **hit.model_dump(by_alias=False, exclude={"backend", "expansion"}),
        }
        fact = facts.get(hit.session_id or "")
        if fact is not None:
            fields.update(fact.hit_fields())
        expansion = setup_aware(hit.expansion, hit.session_id, fields["setup_match"])
        hits.append(
            RecallHit(backend="memory", event_id=None, wake_id=None, created_at=None, expansion=expansion, **fields)
        )
    return hits


def _key(hit: RecallHit) -> tuple[str | None, ...]:
    if hit.wake_id is not None and hit.event_id is None:
        return ("wake", hit.session_id, hit.wake_id)
    if hit.session_id is not None or hit.event_id is not None:
        return ("anchor", hit.session_id, hit.event_id)
    return ("content", hit.source, hit.title, hit.snippet)


def _confidence(score: float, evidence: int) -> Literal["low", "medium", "high"]:
    if evidence >= 2 or score >= 10:
        return "high"
    return "medium" if score >= 6 else "low"


def _fields(hit: RecallHit) -> dict[str, Any]:
    """The fields every backend's hit has (a trace hit's extras stay with session_search_traces)."""
    return hit.model_dump(by_alias=False, include=set(RecallHit.model_fields))


def _evidence(hit: RecallHit) -> Evidence:
    return Evidence(
        backend=hit.backend,
        source=hit.source,
        score=hit.score,
        reasons=hit.reasons,
        setup_match=hit.setup_match,
        session_relation=hit.session_relation,
    )


def merge(groups: list[list[RecallHit]], limit: int) -> list[MergedHit]:
    """One hit per anchor (a session's event, a wake, or a text): the strongest, scored max + one point per further
    distinct (backend, source) that found it, reasons united, confidence from score and support."""
    merged: dict[tuple[str | None, ...], MergedHit] = {}
    for group in groups:
        for hit in group:
            key = _key(hit)
            old = merged.get(key)
            if old is None:
                merged[key] = MergedHit(**_fields(hit), confidence=_confidence(hit.score, 1), evidence=[_evidence(hit)])
                continue
            evidence = list(old.evidence)
            if not any(e.backend == hit.backend and e.source == hit.source for e in evidence):
                evidence.append(_evidence(hit))
            strongest: RecallHit = hit if hit.score > old.score else old
            score = max(old.score, hit.score) + len(evidence) - 1
            merged[key] = MergedHit(
                **{k: v for k, v in _fields(strongest).items() if k not in ("score", "reasons")},
                score=score,
                reasons=list(dict.fromkeys([*old.reasons, *hit.reasons])),
                confidence=_confidence(score, len(evidence)),
                evidence=evidence,
            )
    return ranked(list(merged.values()))[:limit]


def plan(hits: list[MergedHit], urgency: dict[str, int], extra: NextTool | None) -> list[PlanStep]:
    """The hits' expansions grouped by (tool, args), most supported first, weighted by urgency."""
    steps: dict[str, PlanStep] = {}
    for hit in hits:
        key = hit.expansion.tool + json.dumps(hit.expansion.args, sort_keys=True)
        step = steps.get(key)
        if step is None:
            steps[key] = PlanStep(**hit.expansion.model_dump(), support_count=1, candidate_titles=[hit.title])
            continue
        step.support_count += 1
        if hit.title not in step.candidate_titles:
            step.candidate_titles.append(hit.title)
    if extra is not None and not any(s.tool == extra.tool for s in steps.values()):
        steps["extra"] = PlanStep(**extra.model_dump(), support_count=0, candidate_titles=[])

    def order(step: PlanStep) -> tuple[int, int]:
        priority = TOOL_PRIORITY.index(step.tool) if step.tool in TOOL_PRIORITY else len(TOOL_PRIORITY)
        return (-(step.support_count + urgency.get(step.tool, 0)), priority)

    return sorted(steps.values(), key=order)


async def _urgency(ctx: ToolContext) -> tuple[dict[str, int], NextTool | None]:
    """While the current outcome is not ready, outcome steps weigh more; when it has stalled, its history leads
    the plan even if no hit pointed there."""
    current = await posture(ctx, ctx.session_id)
    if current.active_outcome is None or current.promotion_ready:
        return {}, None
    stalled = current.outcome_trend in ("stable", "regressing")
    weights = {**URGENCY, "outcome_history": 5 if stalled else 3, "outcome_evaluate": 1 if stalled else 2}
    step = current.next_outcome_step if stalled and current.next_outcome_step is not None else None
    return weights, step if step is not None and step.tool == "outcome_history" else None


async def retrieval_search(ctx: ToolContext, args: RetrievalArgs) -> RetrievalOutput:
    parse_query(args.query)
    chosen = list(dict.fromkeys(args.backends or DEFAULT_BACKENDS))
    groups: list[list[RecallHit]] = []
    summary: list[BackendSummary] = []
    for backend in chosen:
        if backend == "vector":
            summary.append(BackendSummary(backend=backend, available=False, count=0, top_score=None, note=NO_VECTOR))
            continue
        if backend == "memory":
            hits = await _memory_hits(ctx, args)
        elif backend == "session_context":
            hits = await context_hits(ctx, args)
        else:
            hits = list(await trace_hits(ctx, args))
        groups.append(hits)
        top = max((h.score for h in hits), default=None)
        summary.append(BackendSummary(backend=backend, available=True, count=len(hits), top_score=top, note=None))
    merged = merge(groups, args.limit)
    urgency, extra = await _urgency(ctx)
    return RetrievalOutput(
        agent_id=ctx.agent_id,
        query=args.query,
        count=len(merged),
        backend_summary=summary,
        expansion_plan=plan(merged, urgency, extra),
        hits=merged,
    )
