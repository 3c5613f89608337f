"""`session_search_context` (event by event) and `session_search_traces` (wake by wake): the FTS5 index of the
event log, this agent's sessions only, re-ranked with the reference's scores (§3): the lexical score of the text
+2 for an event (+3 for a trace), +2 when the session ran under the current setup, the relation and outcome
boosts. The index picks the candidates (the whole query as a phrase, then every word, then any word, newest first);
the reference's order decides among them."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from managed_tools.stores import event_search, events, sessions
from managed_tools.stores.event_search import EventMatch, EventScope
from managed_tools.stores.search import make_snippet
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.retrieval import Query, build_query, score_text, search_parts, setup_aware
from managed_tools.tools.framework.context.scope import Lineage, in_lineage, relation, scoped_session
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, NextTool, NonEmptyStr, WireModel
from managed_tools.tools.recall.hits import RecallHit, SessionFacts, needles, ranked, session_facts

CONTEXT_BOOST = 2
TRACE_BOOST = 3
TRACE_TEXT_EVENTS = 8  # matched events of one wake that make up its searchable text


class RecallArgs(Arguments):
    query: Annotated[NonEmptyStr, Field(max_length=1000, description='Words; "quoted phrases" exact.')]
    limit: Annotated[int, Field(ge=1, le=50)] = 8
    include_current: bool = Field(default=False, description="Include this session.")
    lineage: Lineage | None = Field(default=None, description="Relation to this session.")


class ContextSearchArgs(RecallArgs):
    types: Annotated[list[NonEmptyStr], Field(max_length=32, description="Only events of these types.")] | None = None


class ContextSearchOutput(WireModel):
    agent_id: str
    query: str
    count: int
    hits: list[RecallHit]


class TraceHit(RecallHit):
    event_count: int
    event_types: list[str]
    latest_summary: str | None


class TraceSearchOutput(WireModel):
    session_id: str
    count: int
    hits: list[TraceHit]


def parse_query(text: str) -> Query:
    query = build_query(text)
    if query.empty:
        raise ToolError("The query has no searchable words (stopwords and one-letter words are ignored).")
    return query


async def _matches(
    ctx: ToolContext, args: RecallArgs, query: Query, count: int, types: list[str] | None = None
) -> tuple[list[EventMatch], dict[str, SessionFacts]]:
    """Up to `count` candidate events in the scope the arguments ask for, and the facts of their sessions."""
    allowed = None
    if args.lineage is not None:
        current = await scoped_session(ctx, None)
        others = await sessions.list_agent_sessions(ctx.tx, ctx.agent_id, owner=ctx.owner)
        allowed = {s.id for s in others if s.id != current.id and in_lineage(args.lineage, relation(current, s))}
    scope = EventScope(
        agent_id=ctx.agent_id,
        owner=ctx.owner,
        exclude_session=None if args.include_current else ctx.session_id,
        sessions=allowed,
        types=types,
    )
    terms, phrases, fallback = search_parts(query)
    found = await event_search.search_events(
        ctx.tx, scope, terms, phrases, count, whole=query.normalized, fallback_words=fallback
    )
    return found, await session_facts(ctx, {m.session_id for m in found})


def candidates(limit: int) -> int:
    return max(24, limit * 3)


async def context_hits(ctx: ToolContext, args: RecallArgs, types: list[str] | None = None) -> list[RecallHit]:
    query = parse_query(args.query)
    found, facts = await _matches(ctx, args, query, candidates(args.limit), types)
    hits: list[RecallHit] = []
    for match in found:
        lexical, reasons = score_text(match.body, query)
        fact = facts.get(match.session_id)
        if lexical == 0 or fact is None:
            continue  # the index matched on word pieces the reference's substring tests do not see
        hits.append(
            RecallHit(
                backend="session_context",
                source=match.type,
                event_id=match.id,
                wake_id=match.wake_id,
                title=f"{match.type} @ {match.session_id}",
                snippet=make_snippet(match.body, needles(query)),
                score=lexical + CONTEXT_BOOST + fact.boost,
                reasons=[*reasons, f"source:{match.type}+{CONTEXT_BOOST}", *fact.reasons],
                created_at=match.created_at,
                expansion=setup_aware(_event_expansion(match), match.session_id, fact.setup_match),
                **fact.hit_fields(),
            )
        )
    return _one_span_a_wake(ranked(hits), types)[: args.limit]


def _one_span_a_wake(hits: list[RecallHit], types: list[str] | None) -> list[RecallHit]:
    """Every call leaves two span events whose text repeats its arguments and result, and each expands to the
    same trace: unasked for by `types`, only the best of a wake's span hits is kept, so the other events (messages,
    outcomes, notes) are not crowded out (issue 38, item 15)."""
    if types is not None:
        return hits
    seen: set[tuple[str | None, str]] = set()
    kept = []
    for hit in hits:
        if hit.source.startswith("span.") and hit.wake_id is not None:
            if (hit.session_id, hit.wake_id) in seen:
                continue
            seen.add((hit.session_id, hit.wake_id))
        kept.append(hit)
    return kept


def _event_expansion(match: EventMatch) -> NextTool:
    if match.wake_id is not None:
        return NextTool(
            tool="session_get_trace",
            args={"sessionId": match.session_id, "wakeId": match.wake_id},
            rationale="Read the wake (one connection's work) that produced this event.",
        )
    return NextTool(
        tool="session_get_events",
        args={"sessionId": match.session_id, "aroundEventId": match.id, "beforeLimit": 2, "afterLimit": 2},
        rationale="Read the events around this one.",
    )


async def trace_hits(ctx: ToolContext, args: RecallArgs) -> list[TraceHit]:
    query = parse_query(args.query)
    found, facts = await _matches(ctx, args, query, candidates(args.limit) * 3)
    by_wake: dict[tuple[str, str], list[EventMatch]] = {}
    for match in found:
        if match.wake_id is not None:
            by_wake.setdefault((match.session_id, match.wake_id), []).append(match)
    summaries = await events.traces_of(ctx.tx, {wake for _, wake in by_wake})
    hits: list[TraceHit] = []
    for (sid, wake), matched in by_wake.items():
        trace, fact = summaries.get(wake), facts.get(sid)
        if trace is None or fact is None:
            continue
        text = "\n".join([trace.latest_summary or "", *(m.body for m in matched[:TRACE_TEXT_EVENTS])])
        lexical, reasons = score_text(text, query)
        if lexical == 0:
            continue
        hits.append(
            TraceHit(
                backend="session_trace",
                source="wake.trace",
                event_id=None,
                wake_id=wake,
                title=f"{trace.latest_summary or 'wake.trace'} @ {wake}",
                snippet=make_snippet(text, needles(query)),
                score=lexical + TRACE_BOOST + fact.boost,
                reasons=[
                    *reasons,
                    f"source:wake.trace+{TRACE_BOOST}",
                    f"events:{trace.event_count}",
                    f"matched-events:{len(matched)}",
                    *fact.reasons,
                ],
                created_at=trace.updated_at,
                expansion=setup_aware(
                    NextTool(
                        tool="session_get_trace",
                        args={"sessionId": sid, "wakeId": wake},
                        rationale="Read the wake (one connection's work) that best matches the query.",
                    ),
                    sid,
                    fact.setup_match,
                ),
                event_count=trace.event_count,
                event_types=trace.event_types,
                latest_summary=trace.latest_summary,
                **fact.hit_fields(),
            )
        )
    return ranked(hits)[: args.limit]


async def session_search_context(ctx: ToolContext, args: ContextSearchArgs) -> ContextSearchOutput:
    hits = await context_hits(ctx, args, args.types)
    return ContextSearchOutput(agent_id=ctx.agent_id, query=args.query, count=len(hits), hits=hits)


async def session_search_traces(ctx: ToolContext, args: RecallArgs) -> TraceSearchOutput:
    hits = await trace_hits(ctx, args)
    return TraceSearchOutput(session_id=ctx.session_id, count=len(hits), hits=hits)
