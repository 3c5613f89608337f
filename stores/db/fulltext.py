"""Full-text matching as SQLite's FTS5 does it, for the engines that lack FTS5 (PostgreSQL).

A query is a `Match`: quoted terms and phrases, all of them or any of them. On SQLite it is rendered as an FTS5
expression (every part quoted, so no user text is syntax). On PostgreSQL the words come from `words` below (FTS5's
`unicode61` tokenizer: runs of letters and digits, case-folded, Latin diacritics removed), never from the server's
parser or locale, so both engines see the same words in the same text. A `tsvector` of a text's distinct words
(GIN-indexed) narrows the rows; the phrases and the bm25 score are then computed here on the text itself, exactly
as FTS5 computes them (`bm25` below follows `fts5Bm25Function`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

_WORD = re.compile(r"[^\W_]+")
# A lexeme PostgreSQL indexes is at most 2047 bytes; a longer word (a blob) is indexed by its prefix and checked in
# full on the text, so it still matches exactly.
_MAX_LEXEME = 400

K1 = 1.2
B = 0.75


@lru_cache(maxsize=65536)
def _fold(word: str) -> str:
    lowered = word.lower()
    if lowered.isascii():
        return lowered
    stripped = "".join(c for c in unicodedata.normalize("NFD", lowered) if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", stripped)


def words(text: str) -> list[str]:
    """The tokens FTS5's unicode61 tokenizer finds in `text`, in order."""
    return [_fold(w) for w in _WORD.findall(text)]


def _lexeme(word: str) -> str:
    return word[:_MAX_LEXEME]


def tsvector(tokens: Iterable[str]) -> str:
    """A tsvector literal of the distinct tokens (no positions: phrases are checked on the text)."""
    return " ".join(sorted({f"'{_lexeme(t)}'" for t in tokens}))


def occurrences(tokens: Sequence[str], phrase: Sequence[str]) -> int:
    """How many times `phrase` (a token sequence) occurs in `tokens`, as FTS5 counts phrase hits."""
    if not phrase:
        return 0
    first, size = phrase[0], len(phrase)
    return sum(1 for i, t in enumerate(tokens) if t == first and list(tokens[i : i + size]) == list(phrase))


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


@dataclass(frozen=True)
class Match:
    """Texts holding every part (`every`) or any part; each part is a term or a phrase, matched as FTS5 matches a
    quoted string: the sequence of its words."""

    parts: tuple[str, ...]
    every: bool

    def fts5(self) -> str:
        return (" AND " if self.every else " OR ").join(_quote(p) for p in self.parts)

    def phrases(self) -> list[list[str]]:
        return [words(p) for p in self.parts]

    def tsquery(self) -> str | None:
        """A tsquery literal matching a superset of the texts this matches (each phrase as all of its words);
        None when it can match nothing."""
        groups = ["(" + " & ".join(f"'{_lexeme(w)}'" for w in phrase) + ")" for phrase in self.phrases() if phrase]
        if not groups or (self.every and len(groups) < len(self.parts)):
            return None
        return (" & " if self.every else " | ").join(groups)

    def hits(self, tokens: Sequence[str]) -> list[int] | None:
        """Occurrences of each phrase in `tokens`, or None when the text does not match."""
        counts = [occurrences(tokens, phrase) for phrase in self.phrases()]
        found = all(counts) if self.every else any(counts)
        return counts if found else None


def match_all(terms: list[str], phrases: list[str]) -> Match:
    return Match(tuple([*phrases, *terms]), every=True)


def match_any(terms: list[str], phrases: list[str]) -> Match:
    return Match(tuple([*phrases, *terms]), every=False)


def bm25(hits: Sequence[int], length: int, rows: int, average: float, rows_with: Sequence[int]) -> float:
    """FTS5's bm25 of one text: `hits` of each phrase in it, its `length` in tokens, the index's `rows` and
    `average` length, and how many rows hold each phrase. Lower is better, as in FTS5."""
    score = 0.0
    for count, found_in in zip(hits, rows_with, strict=True):
        idf = math.log((rows - found_in + 0.5) / (found_in + 0.5))
        if idf <= 0.0:
            idf = 1e-6
        score += idf * (count * (K1 + 1.0)) / (count + K1 * (1.0 - B + B * length / average))
    return -1.0 * score
