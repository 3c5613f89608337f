"""`memory_search`: FTS5/bm25 over the agent's memory, learnings, outcomes and shell states (cwd, env keys, the
last commands and their output, indexed as each command ends), plus the checkpoint summaries of its recent
sessions, re-ranked with the reference's boosts (reference §3 "memory_search ranking") and explained hit by hit.

score = lexical score (tools.retrieval) + source boost + session boosts + bm25 relevance. A text whose lexical
score is 0 (the index matched it on a folded form, such as "cafe" for "café") names no query word and is dropped.
Ties break on setup match, relation, recency and key, so results are deterministic.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from managed_tools.stores import events, memory, outcomes, search, sessions
from managed_tools.stores.provenance import Trust
from managed_tools.stores.search import SearchRow, make_snippet
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.context import ToolContext
from managed_tools.tools.framework.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.errors import ToolError
from managed_tools.tools.framework.models import Formatted, NextTool, NonEmptyStr, WireModel
from managed_tools.tools.framework.retrieval import build_query, outcome_affinity, score_text, search_parts
from managed_tools.tools.framework.scope import Lineage, in_lineage, relation
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
    if sid is not None and not same_setup:
        return NextTool(
            tool="session_get_snapshot",
            args={"sessionId": sid},
            rationale="That session ran under another setup: check it before relying on its memory.",
        )
    if row.source == "learning":
        return NextTool(tool="learning_list", args={}, rationale="Read the learning in full with its neighbours.")
    if row.source in ("session_evaluation", "session_outcome"):
        return NextTool(
            tool="outcome_history", args={"sessionId": sid}, rationale="See how that outcome was judged over time."
        )
    args: dict[str, Any] = {"target": row.source}
    if sid is not None:
        args["sessionId"] = sid
    return NextTool(tool="memory_read", args=args, rationale="Read the whole store this snippet comes from.")


async def checkpoint_rows(ctx: ToolContext, needles: list[str]) -> list[SearchRow]:
    """Each recent session's checkpoint summary: it changes with every call, so it is read, not indexed (the
    shell state is indexed when a command ends). No bm25; the lexical score alone keeps or drops it."""
    recent = await sessions.list_agent_sessions(ctx.tx, ctx.agent_id, owner=ctx.owner, limit=LIVE_SESSIONS)
    summaries = await events.latest_summaries(ctx.tx, [record.id for record in recent])
    rows: list[SearchRow] = []
    for record in recent:
        if record.id in summaries:
            body = f"status {record.status}\n{summaries[record.id]}"
            rows.append(
                SearchRow(
                    key=f"checkpoint:{record.id}",
                    source="checkpoint",
                    session_id=record.id,
                    title="checkpoint",
                    created_at=record.last_activity_at,
                    body=body,
                    snippet=make_snippet(body, needles),
                    bm25=0.0,
                )
            )
    return rows


async def memory_search(ctx: ToolContext, args: SearchArgs) -> SearchOutput:
    query = build_query(args.query)
    if query.empty:
        raise ToolError("The query has no searchable words (stopwords and one-letter words are ignored).")
    terms, phrases, fallback = search_parts(query)
    rows = await search.search(
        ctx.tx, ctx.agent_id, terms, phrases, max(CANDIDATES, args.limit * 3), owner=ctx.owner, fallback_words=fallback
    )
    rows += await checkpoint_rows(ctx, [*phrases, *terms])
    session_ids = {r.session_id for r in rows if r.session_id is not None} | {ctx.session_id}
    known = {sid: found for sid, found in (await sessions.get_many(ctx.tx, session_ids)).items()
             if found[0].owner == ctx.owner}  # fmt: skip
    # A shared text (a learning, the agent's memory) written in another principal's session names no session.
    rows = [row if row.session_id in known else row.model_copy(update={"session_id": None}) for row in rows]
    current = known[ctx.session_id][0]
    setup = setup_fingerprint(ctx.runtime)
    outcome_of = await outcomes.active_many(ctx.tx, session_ids)
    evaluations = await outcomes.latest_evaluations(ctx.tx, session_ids)
    ranked: list[tuple[tuple[float, bool, bool], str, str, Hit]] = []
    for row in rows:
        lexical, reasons = score_text(f"{row.title}\n{row.body}", query)
        if not lexical:
            continue
        score = float(lexical)
        boost = SOURCE_BOOST.get(row.source, 0)
        if boost:
            reasons.append(f"source:{row.source}+{boost}")
        rel = None
        same_setup = True
        evaluation: Evaluation | None = None
        if row.session_id is not None and row.session_id in known:
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
            if row.session_id in evaluations:
                evaluation = Evaluation.model_validate(evaluations[row.session_id].evaluation)
        elif args.lineage is not None:
            continue  # agent-wide texts belong to no lineage
        relevance = round(-row.bm25, 3) or 0.0  # never "-0.0"
        reasons.append(f"bm25:{relevance}")
        score = round(score + boost + relevance, 3)
        hit = Hit(
            backend="memory",
            source=row.source,
            session_id=row.session_id,
            title=row.title,
            snippet=row.snippet[:SNIPPET_CHARS],
            score=score,
            reasons=reasons,
            outcome_status=None if evaluation is None else evaluation.status,
            promotion_ready=None if evaluation is None else evaluation.promotion_ready,
            outcome_trend=None if evaluation is None else evaluation.trend,
            requires_action=row.session_id is not None
            and row.session_id in known
            and known[row.session_id][0].status == "requires_action",
            expansion=_expansion(row, same_setup),
        )
        ranked.append(((-score, not same_setup, rel is None), row.created_at, row.key, hit))
    # Best score, same setup, related, then newest, then key: stable sorts from the last key to the first.
    ranked.sort(key=lambda entry: entry[2])
    ranked.sort(key=lambda entry: entry[1], reverse=True)
    ranked.sort(key=lambda entry: entry[0])
    hits = []
    for _, _, key, hit in ranked[: args.limit]:
        sources = await memory.search_key_provenance(ctx.tx, key)
        hits.append(hit if sources is None else hit.model_copy(update={"trust": sources.trust}))
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
