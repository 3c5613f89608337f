"""When a new learning repeats or contradicts one recorded before: a cheap, deterministic rule (docs/memory-correct.md).

Each text becomes a set of content words: lower-cased, `n't` read as `not`, common function words dropped, and each
word of an opposite pair (always/never, use/avoid, enable/disable, ...) replaced by the pair's first word. Negations
(not, no, never, ...) and the second words of pairs are not kept as words but counted: the text's polarity is that
count's parity. Two texts are alike by the Jaccard index of their word sets. Alike at DUPLICATE or more with the same
polarity: a near-duplicate; alike at CONTRADICTION or more with opposite polarities: a contradiction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

DUPLICATE = 0.6
CONTRADICTION = 0.5
NEGATIONS = frozenset({"not", "no", "nor", "cannot", "dont", "doesnt", "isnt", "shouldnt"})
OPPOSITES = {
    "never": "always", "avoid": "use", "disable": "enable", "disabled": "enabled", "false": "true", "off": "on",
    "deny": "allow", "exclude": "include", "decrease": "increase", "remove": "add", "after": "before",
    "without": "with", "forbid": "require", "wrong": "right", "slower": "faster", "stop": "start",
}  # fmt: skip
_FUNCTION_WORDS = (
    "a an the and or of to in at for by from is are was were be been it its this that these those as so then "
    "than do does did should must can will would could may might i we you they he she our your their my"
)
STOPWORDS = frozenset(_FUNCTION_WORDS.split(" "))


@dataclass(frozen=True)
class Reading:
    words: frozenset[str]
    negative: bool


def reading(text: str) -> Reading:
    raw = re.findall(r"[a-z0-9]+", re.sub(r"n't\b", " not", text.lower().replace("\u2019", "'")))
    words: set[str] = set()
    flips = 0
    for word in raw:
        if word in OPPOSITES:
            flips += 1
            words.add(OPPOSITES[word])
        elif word in NEGATIONS:
            flips += 1
        elif word not in STOPWORDS:
            words.add(word)
    return Reading(frozenset(words), flips % 2 == 1)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def relation(new: Reading, old: Reading) -> tuple[Literal["duplicate", "contradiction"], float] | None:
    alike = jaccard(new.words, old.words)
    if new.negative == old.negative and alike >= DUPLICATE:
        return "duplicate", alike
    if new.negative != old.negative and alike >= CONTRADICTION:
        return "contradiction", alike
    return None
