"""`memory_search`: FTS5/bm25 over the agent's memory, learnings, outcomes and shell states (cwd, env keys, the
last commands and their output, indexed as each command ends), plus the checkpoint summaries of its recent
sessions, re-ranked with the reference's boosts (reference §3 "memory_search ranking") and explained hit by hit.

score = lexical score (tools.retrieval) + source boost + session boosts + bm25 relevance. A text whose lexical
score is 0 (the index matched it on a folded form, such as "cafe" for "café") names no query word and is dropped.
Ties break on setup match, relation, recency and key, so results are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import Field

from managed_tools.stores import memory, outcomes, search, sessions
from managed_tools.stores.provenance import Trust
from managed_tools.stores.search import SearchRow, make_snippet
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.retrieval import (
    build_query,
    outcome_affinity,
    score_text,
    search_parts,
    setup_aware,
)
from managed_tools.tools.framework.context.scope import Lineage, in_lineage, relation
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Formatted, NextTool, NonEmptyStr, WireModel
from managed_tools.tools.outcomes.gate import Evaluation

SOURCE_BOOST = {
    "learning": 5,
    "workspace_memory_notes": 4,
    "session_evaluation": 3,
    "session_outcome": 2,
    "checkpoint": 1,
}
CANDIDATES = 24  # re-ranked in Python; three times the default limit
SNIPPET_CHARS = 180
LIVE_SESSIONS = 50  # the agent's most recently active sessions whose checkpoint summaries are searched


class Hit(WireModel):
    backend: Literal["memory"]
    source: str
    session_id: str | None
    title: str
    snippet: str
    score: float
    reasons: list[str]
    outcome_status: str | None
    promotion_ready: bool | None
    outcome_trend: str | None
    requires_action: bool
    expansion: NextTool
    trust: Trust | None = Field(default=None, description="A memory store's: untrusted if fed by an upstream result.")


class SearchArgs(Formatted):
    query: Annotated[NonEmptyStr, Field(max_length=1000, description='Words; "quoted phrases" exact.')]
    limit: Annotated[int, Field(ge=1, le=50)] = 8
    lineage: Lineage | None = Field(default=None, description="Relation to this session.")


class SearchOutput(WireModel):
    agent_id: str
    query: str
    count: int
    hits: list[Hit]


def _expansion(row: SearchRow, same_setup: bool) -> NextTool:
    sid = row.session_id
    return setup_aware(_own_expansion(row), sid, None if sid is None else same_setup)


def _own_expansion(row: SearchRow) -> NextTool:
    """Where a hit is read in full (reference §3): a shell state hit in its last command's output."""
    sid = row.session_id
    scoped: dict[str, Any] = {} if sid is None else {"sessionId": sid}
    if row.source == "learning":
        return NextTool(tool="learning_list", args={}, rationale="Read the learning in full with its neighbours.")
    if row.source in ("session_evaluation", "session_outcome"):
        return NextTool(tool="outcome_history", args=scoped, rationale="See how that outcome was judged over time.")
    if row.source == "shell_state":
        return NextTool(
            tool="shell_read_last_output", args=scoped, rationale="Read that shell's last command and its output."
        )
    return NextTool(
        tool="memory_read",
        args={"target": row.source, **scoped},
        rationale="Read the whole store this snippet comes from.",
    )


async def checkpoint_rows(ctx: ToolContext) -> list[SearchRow]:
    """Each recent session's checkpoint summary: it changes with every call, so it is read, not indexed (the
    shell state is indexed when a command ends). No bm25; the lexical score alone keeps or drops it."""
    recent = await sessions.recent_summaries(ctx.tx, ctx.agent_id, owner=ctx.owner, limit=LIVE_SESSIONS)
    return [
        SearchRow(
            key=f"checkpoint:{session_id}",
            source="checkpoint",
            session_id=session_id,
            title="checkpoint",
            created_at=last_activity,
            body=f"status {status}\n{summary}",
            bm25=0.0,
        )
        for session_id, status, last_activity, summary in recent
    ]


@dataclass(frozen=True)
class _Ranked:
    """A candidate that scored, before it is shown: only the best `limit` become hits."""

    order: tuple[float, bool, bool]  # best score, same setup, related
    row: SearchRow
    score: float
    reasons: list[str]
    same_setup: bool


async def memory_search(ctx: ToolContext, args: SearchArgs) -> SearchOutput:
    query = build_query(args.query)
    if query.empty:
        raise ToolError("The query has no searchable words (stopwords and one-letter words are ignored).")
    terms, phrases, fallback = search_parts(query)
    found = await search.search(
        ctx.tx, ctx.agent_id, terms, phrases, max(CANDIDATES, args.limit * 3), owner=ctx.owner, fallback_words=fallback
    )
    found += await checkpoint_rows(ctx)
    # A text whose lexical score is 0 names no query word: dropped before anything is read about its session.
    scored = [(row, *score_text(f"{row.title}\n{row.body}", query)) for row in found]
    rows = [(row, lexical, reasons) for row, lexical, reasons in scored if lexical]
    session_ids = {row.session_id for row, _, _ in rows if row.session_id is not None} | {ctx.session_id}
    known = {sid: entry for sid, entry in (await sessions.get_many(ctx.tx, session_ids)).items()
             if entry[0].owner == ctx.owner}  # fmt: skip
    current = known[ctx.session_id][0]
    setup = setup_fingerprint(ctx.runtime)
    outcome_of = await outcomes.active_many(ctx.tx, session_ids)
    # A shared text (a learning, the agent's memory) written in another principal's session names no session.
    rows = [(row if row.session_id in known else replace(row, session_id=None), lex, why) for row, lex, why in rows]
    ranked: list[_Ranked] = []
    for row, lexical, reasons in rows:
        score = float(lexical)
        boost = SOURCE_BOOST.get(row.source, 0)
        if boost:
            reasons.append(f"source:{row.source}+{boost}")
        rel = None
        same_setup = True
        if row.session_id is not None:
            record, fingerprint = known[row.session_id]
            rel = relation(current, record)
            if not in_lineage(args.lineage, rel):
                continue
            same_setup = fingerprint == setup
            for label, value in (
                ("relation", {"parent": 2, "child": 2, "sibling": 1}.get(rel or "", 0)),
                ("setup-match", 2 if same_setup else 0),
                ("outcome-affinity", outcome_affinity(outcome_of.get(ctx.session_id), outcome_of.get(row.session_id))),
            ):
                if value:
                    boost += value
                    reasons.append(f"{label}+{value}")
        elif args.lineage is not None:
            continue  # agent-wide texts belong to no lineage
        relevance = round(-row.bm25, 3) or 0.0  # never "-0.0"
        reasons.append(f"bm25:{relevance}")
        score = round(score + boost + relevance, 3)
        ranked.append(_Ranked((-score, not same_setup, rel is None), row, score, reasons, same_setup))
    # Best score, same setup, related, then newest, then key: stable sorts from the last key to the first.
    ranked.sort(key=lambda entry: entry.row.key)
    ranked.sort(key=lambda entry: entry.row.created_at, reverse=True)
    ranked.sort(key=lambda entry: entry.order)
    best = ranked[: args.limit]
    evaluations = await outcomes.latest_evaluations(ctx.tx, {e.row.session_id for e in best if e.row.session_id})
    needles = [*phrases, *terms]
    hits = []
    for entry in best:
        row = entry.row
        shown = evaluations.get(row.session_id) if row.session_id is not None else None
        evaluation = None if shown is None else Evaluation.model_validate(shown.evaluation)
        sources = await memory.search_key_provenance(ctx.tx, row.key)
        hit = Hit(
            backend="memory",
            source=row.source,
            session_id=row.session_id,
            title=row.title,
            snippet=make_snippet(row.body, needles)[:SNIPPET_CHARS],
            score=entry.score,
            reasons=entry.reasons,
            outcome_status=None if evaluation is None else evaluation.status,
            promotion_ready=None if evaluation is None else evaluation.promotion_ready,
            outcome_trend=None if evaluation is None else evaluation.trend,
            requires_action=row.session_id is not None and known[row.session_id][0].status == "requires_action",
            expansion=_expansion(row, entry.same_setup),
            trust=None if sources is None else sources.trust,
        )
        hits.append(hit)
    return SearchOutput(agent_id=ctx.agent_id, query=args.query, count=len(hits), hits=hits)


DEFINITIONS = (
    ToolDefinition(
        name="memory_search",
        title="Search memory",
        description="Search this agent's memory, learnings, outcomes, checkpoints and shell commands; each hit "
        "says why it matched and what to read next.",
        input_model=SearchArgs,
        output_model=SearchOutput,
        handler=memory_search,
        effects=("memory_read", "learning_read"),
        examples=(ToolExample(description="Find a past decision", input={"query": '"release notes" changelog'}),),
    ),
)
