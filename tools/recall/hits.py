"""What the recall backends share: the hit they return, the facts about a hit's session that boost it, and the
expansion that says what to read next (reference §3: relation, setup and outcome boosts; setup-aware expansions)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from managed_tools.stores import outcomes, sessions
from managed_tools.stores.provenance import Trust
from managed_tools.stores.sessions import SessionRecord
from managed_tools.tools.environment.setup import setup_fingerprint
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.retrieval import Query, outcome_affinity
from managed_tools.tools.framework.context.scope import Relation, relation
from managed_tools.tools.framework.wire.models import NextTool, WireModel
from managed_tools.tools.outcomes.gate import Evaluation

Backend = Literal["memory", "session_context", "session_trace"]
RELATION_BOOST: dict[Relation, int] = {"parent": 2, "child": 2, "sibling": 1}


class RecallHit(WireModel):
    backend: Backend
    source: str
    session_id: str | None
    event_id: str | None
    wake_id: str | None
    title: str
    snippet: str
    score: float
    reasons: list[str]
    created_at: str | None
    setup_match: bool | None
    session_relation: Relation | None
    requires_action: bool
    outcome_status: str | None
    promotion_ready: bool | None
    outcome_trend: str | None
    expansion: NextTool
    trust: Trust | None = None  # a memory hit's (stores/provenance.py): untrusted content says so here too


@dataclass(frozen=True)
class SessionFacts:
    """A session as a hit's context: its relation to the current one, whether it ran under the current setup
    (None: it never connected), its outcome posture, and the boost these earn with their reasons."""

    record: SessionRecord
    relation: Relation | None
    setup_match: bool | None
    boost: int
    reasons: tuple[str, ...]
    evaluation: Evaluation | None

    def hit_fields(self) -> dict[str, Any]:
        return {
            "session_id": self.record.id,
            "setup_match": self.setup_match,
            "session_relation": self.relation,
            "requires_action": self.record.status == "requires_action",
            "outcome_status": None if self.evaluation is None else self.evaluation.status,
            "promotion_ready": None if self.evaluation is None else self.evaluation.promotion_ready,
            "outcome_trend": None if self.evaluation is None else self.evaluation.trend,
        }


async def session_facts(ctx: ToolContext, session_ids: Collection[str]) -> dict[str, SessionFacts]:
    """Facts about each named session of this agent (another agent's ids are simply absent)."""
    wanted = set(session_ids) | {ctx.session_id}
    known = await sessions.get_many(ctx.tx, wanted)
    current = known[ctx.session_id][0]
    setup = setup_fingerprint(ctx.runtime)
    outcome_of = await outcomes.active_many(ctx.tx, wanted)
    evaluations = await outcomes.latest_evaluations(ctx.tx, wanted)
    facts: dict[str, SessionFacts] = {}
    for sid, (record, fingerprint) in known.items():
        if record.agent_id != ctx.agent_id:
            continue
        rel = relation(current, record)
        setup_match = None if fingerprint is None else fingerprint == setup
        boosts = [
            (f"relation:{rel}", RELATION_BOOST[rel] if rel else 0),
            ("setup-match", 2 if setup_match else 0),
            ("outcome-affinity", outcome_affinity(outcome_of.get(ctx.session_id), outcome_of.get(sid))),
        ]
        reasons = [f"{label}+{value}" for label, value in boosts if value]
        if setup_match is False:
            reasons.append("setup-differs")
        facts[sid] = SessionFacts(
            record=record,
            relation=rel,
            setup_match=setup_match,
            boost=sum(value for _, value in boosts),
            reasons=tuple(reasons),
            evaluation=_evaluation(evaluations.get(sid)),
        )
    return facts


def _evaluation(record: outcomes.EvaluationRecord | None) -> Evaluation | None:
    if record is None:
        return None
    try:
        return Evaluation.model_validate(record.evaluation)
    except ValidationError:
        return None  # written by an older server in another shape: no posture rather than a failed search


def needles(query: Query) -> list[str]:
    """Where a snippet is anchored, best anchor first (reference buildRetrievalSnippet)."""
    return [query.normalized, *query.phrases, *query.path_terms, *query.identifiers, *query.terms]


H = TypeVar("H", bound=RecallHit)


def ranked(hits: list[H]) -> list[H]:
    """Reference order: score, then same setup, then related, then newest (stable sorts, least key first)."""
    newest = sorted(hits, key=lambda hit: hit.created_at or "", reverse=True)
    return sorted(newest, key=lambda hit: (-hit.score, hit.setup_match is not True, hit.session_relation is None))
