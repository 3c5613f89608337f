"""BM25 over the served tools: each tool's name, title, description, argument names and example descriptions as
weighted fields (BM25F), written here in a few lines (docs/decisions/tool-search-bm25.md says why not FTS5 or a
library). Names are split at `_`, `-` and camelCase so `memory_write` is two words, and a light stemmer lets
"files" find `file` and "planning" find `plan`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from managed_tools.tools.framework.definitions.definition import ToolDefinition

# Field weights: a word in the name says most, then the title, the description, the argument names, the examples.
WEIGHTS = (4.0, 2.0, 1.0, 1.0, 1.0)
K1, B = 1.2, 0.75  # the usual BM25 constants
WORD = re.compile(r"[A-Za-z0-9]+")
CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
MAX_QUERY_WORDS = 32
# Words of a request that say nothing about which tool ("show me the ..."): left out of the query.
STOPWORDS = frozenset({
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "for", "from", "i", "in", "into", "is", "it",
    "its", "me", "my", "of", "on", "or", "our", "so", "that", "the", "them", "then", "there", "these", "this", "to",
    "up", "us", "was", "we", "what", "when", "where", "which", "who", "will", "with", "you", "your",
})  # fmt: skip


# Everyday verbs of a request, and the word the catalogue uses for them.
SYNONYMS = {"save": "write", "store": "write", "show": "read", "view": "read", "find": "search", "look": "search"}


def stem(word: str) -> str:
    """A light suffix stripper (plural, -ing, -ed, a final e, a doubled consonant): enough to make a request's
    "sessions", "planning" or "staged" meet a tool's "session", "plan" or "stage"."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-3] + "y" if word.endswith("ies") else word[:-1]
    for suffix in ("ing", "ed"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            if len(word) > 2 and word[-1] == word[-2] and word[-1] not in "aeiouls":
                word = word[:-1]
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def words(text: str, synonyms: dict[str, str] | None = None) -> list[str]:
    """The stemmed lower-case words of `text`, camelCase and snake_case split, stopwords left out, each of
    `synonyms` replaced first."""
    found = (w.lower() for w in WORD.findall(CAMEL.sub(" ", text)))
    return [stem((synonyms or {}).get(w, w)) for w in found if w not in STOPWORDS]


def argument_names(schema: Any) -> list[str]:
    """Every property named anywhere in an input schema, and the values its string enums offer (memory_read's
    `store` names `working_buffer`)."""
    found: list[str] = []
    if isinstance(schema, dict):
        found += list((schema.get("properties") or {}).keys())
        found += [value for value in schema.get("enum", ()) if isinstance(value, str)]
        for key, value in schema.items():
            if key not in ("enum", "const", "default", "examples"):
                found += argument_names(value)
    elif isinstance(schema, list):
        for item in schema:
            found += argument_names(item)
    return found


def fields(definition: ToolDefinition) -> tuple[str, ...]:
    return (
        definition.name,
        definition.title,
        definition.description,
        " ".join(argument_names(definition.input_schema())),
        " ".join(example.description for example in definition.examples),
    )


class ToolIndex:
    """The served tools, indexed once; `search` ranks them for a query."""

    def __init__(self, definitions: Iterable[ToolDefinition]) -> None:
        self._names: list[str] = []
        self._fields: list[list[Counter[str]]] = []  # per tool, per field: word counts
        for definition in definitions:
            self._names.append(definition.name)
            self._fields.append([Counter(words(text)) for text in fields(definition)])
        count = max(len(self._names), 1)
        self._average = [max(sum(sum(f[i].values()) for f in self._fields) / count, 1.0) for i in range(len(WEIGHTS))]
        having = Counter(word for tool in self._fields for word in set().union(*tool))
        # Lucene's idf, which stays positive for a word most tools have ("session"), unlike FTS5's.
        self._idf = {word: math.log(1 + (count - n + 0.5) / (n + 0.5)) for word, n in having.items()}

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """The best `limit` tools for `query` (any of its words), best first, with their scores (higher is
        better); none for a query without a word that some tool has."""
        terms = [t for t in dict.fromkeys(words(query, SYNONYMS)) if t in self._idf][:MAX_QUERY_WORDS]
        scored = []
        for position, tool in enumerate(self._fields):
            score = 0.0
            for term in terms:
                weighted = sum(
                    weight * field[term] / (1 - B + B * sum(field.values()) / average)
                    for weight, field, average in zip(WEIGHTS, tool, self._average, strict=True)
                    if field[term]
                )
                score += self._idf[term] * weighted / (weighted + K1)
            if score > 0:
                scored.append((-score, position))
        scored.sort()
        return [(self._names[position], round(-score, 3)) for score, position in scored[:limit]]
