"""The recall benchmark's corpus (bench/data/recall_corpus.json, issue 37) keeps its shape, and its paraphrase
queries really share no content word with their targets, so full-text search alone cannot find them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[2] / "bench" / "data" / "recall_corpus.json"

# The rule: lowercase, split into runs of [a-z0-9], drop the stopwords below, then a light stem that strips one
# suffix ("ing", "ed", "es", "s") when at least three letters remain. "tests" -> "test" but "pytest" stays "pytest".
STOPWORDS = frozenset(
    (
        "a",
        "about",
        "after",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "before",
        "by",
        "can",
        "could",
        "do",
        "does",
        "did",
        "for",
        "from",
        "get",
        "got",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "should",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "up",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    )
)
SUFFIXES = ("ing", "ed", "es", "s")


def stem(word: str) -> str:
    for suffix in SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return data


def test_items_are_many_unique_and_well_formed() -> None:
    items = load()["items"]
    ids = [item["id"] for item in items]
    assert len(set(ids)) == len(ids) >= 300
    assert all(re.fullmatch(r"L\d{3}", i) for i in ids)
    assert len({item["text"] for item in items}) == len(items)
    assert {item["kind"] for item in items} == {"learning", "note"}


def test_queries_split_evenly_and_hit_real_targets() -> None:
    data = load()
    ids = {item["id"] for item in data["items"]}
    queries = data["queries"]
    assert len(queries) == 60
    assert sum(q["paraphrase"] for q in queries) == 30
    assert {q["target"] for q in queries} <= ids
    assert len({q["query"] for q in queries}) == 60


def test_paraphrases_share_no_content_word_and_ordinary_queries_do() -> None:
    data = load()
    texts = {item["id"]: item["text"] for item in data["items"]}
    shared = {q["query"]: content_words(q["query"]) & content_words(texts[q["target"]]) for q in data["queries"]}
    leaks = {q["query"]: shared[q["query"]] for q in data["queries"] if q["paraphrase"] and shared[q["query"]]}
    assert leaks == {}
    assert all(shared[q["query"]] for q in data["queries"] if not q["paraphrase"])
