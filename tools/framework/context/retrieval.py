"""Query parsing and lexical scoring shared by memory_search and outcome grading (reference §3, retrieval/query).

A query yields terms (lower-cased words, stopwords and one-letter words dropped), quoted phrases, path-like
terms (with `/`, `.` or `:`) and identifiers (with `_` or `-`, or digits mixed with letters). A text scores
+6 for the whole query, +4 per phrase, +5 per path term, +3 per identifier and +1 per term it contains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from managed_tools.stores.outcomes import Outcome
from managed_tools.tools.framework.wire.models import NextTool

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "for",
        "from",
        "how",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "with",
    ]
)
MAX_TERMS = 32
_PHRASE = re.compile(r'"([^"]{2,160})"|`([^`]{2,160})`')
_STRUCTURED = re.compile(r"[A-Za-z0-9_./:#-]+")
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Query:
    normalized: str
    terms: list[str]
    phrases: list[str] = field(default_factory=list)
    path_terms: list[str] = field(default_factory=list)
    identifiers: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.terms or self.phrases or self.path_terms or self.identifiers)


def build_query(text: str) -> Query:
    normalized = re.sub(r"\s+", " ", text.lower()).strip()
    phrases = [a or b for a, b in _PHRASE.findall(normalized)]
    rest = _PHRASE.sub(" ", normalized)
    structured = _STRUCTURED.findall(rest)
    path_terms = [t.strip(".:") for t in structured if any(c in t for c in "/.:") and len(t.strip(".:")) > 1]
    identifiers = [
        t
        for t in structured
        if t not in path_terms
        and ("_" in t or "-" in t.strip("-") or (any(c.isdigit() for c in t) and any(c.isalpha() for c in t)))
    ]
    # A hyphenated token (`out-of-the-blue-xyzzy`) is one thing, found as a phrase: its words are no terms of
    # their own, or any text holding `out` would match it.
    plain = _STRUCTURED.sub(lambda m: " " if _hyphenated(m.group()) else m.group(), rest)
    terms = [w for w in _WORD.findall(plain) if len(w) > 1 and w not in STOPWORDS]
    return Query(
        normalized=normalized,
        terms=list(dict.fromkeys(terms))[:MAX_TERMS],
        phrases=list(dict.fromkeys(p.strip() for p in phrases if p.strip()))[:MAX_TERMS],
        path_terms=list(dict.fromkeys(path_terms))[:MAX_TERMS],
        identifiers=list(dict.fromkeys(identifiers))[:MAX_TERMS],
    )


def _hyphenated(token: str) -> bool:
    return "-" in token.strip("-./:#")


def score_text(text: str, query: Query) -> tuple[int, list[str]]:
    """(score, reasons) of one text for a query; case-insensitive substring tests, as the reference does."""
    haystack = text.lower()
    score = 0
    reasons: list[str] = []
    if query.normalized and query.normalized in haystack:
        score += 6
        reasons.append("exact-query")
    for label, items, weight in (
        ("exact-phrase", query.phrases, 4),
        ("path-match", query.path_terms, 5),
        ("identifier-match", query.identifiers, 3),
        ("term-overlap", query.terms, 1),
    ):
        hits = sum(1 for item in items if item in haystack)
        if hits:
            score += weight * hits
            reasons.append(f"{label}:{hits}")
    return score, reasons


def outcome_affinity(current: Outcome | None, other: Outcome | None) -> int:
    """How close another session's outcome is to the current one: +3 for the same title, +1 per shared
    criteria word (longer than two letters), at most +2."""
    if current is None or other is None:
        return 0
    boost = 3 if current.title.strip().lower() == other.title.strip().lower() else 0

    def words(outcome: Outcome) -> set[str]:
        return {w for c in outcome.success_criteria for w in c.lower().split() if len(w) > 2}

    return boost + min(2, len(words(current) & words(other)))


def search_parts(query: Query) -> tuple[list[str], list[str], list[str]]:
    """(terms, phrases, fallback words) for the index. A path or identifier must match as one phrase; the pieces
    of one without a hyphen count in the any-word fallback (so `body:canary` still finds "canary"), those of a
    hyphenated one never (`out-of-the-blue-xyzzy` is no query for `out`)."""
    structured = [*query.identifiers, *query.path_terms]
    pieces = {w for token in structured for w in re.findall(r"\w+", token.lower())}
    loose = {w for token in structured if not _hyphenated(token) for w in re.findall(r"\w+", token.lower())}
    words = [t for t in query.terms if t not in pieces]
    return [*words, *structured], query.phrases, sorted(loose)


def setup_aware(expansion: NextTool, session_id: str | None, setup_match: bool | None) -> NextTool:
    """A hit from a session that ran under another setup points at the setup comparison first (reference §3)."""
    if session_id is None or setup_match is not False:
        return expansion
    return NextTool(
        tool="agent_compare_setup",
        args={"sessionId": session_id},
        rationale="That session ran under another setup: compare it with the current one before reusing its work "
        "or reading its traces.",
    )
