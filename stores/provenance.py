"""Where a memory or substrate version's content came from, and how far it is trusted (docs/trust.md#provenance).

A version records its sources: the tool that wrote it, the session it was written in, and what fed that session
(an upstream server's result, another agent's output, a staged file, a person). Each source has a trust level;
the version's is the lowest of them. A person who approved a promotion with these sources shown *vouches* for
them: their untrusted sources are kept, marked `vouched`, beside the person's approval.

OWASP's top 10 for agentic applications names memory poisoning: text an upstream server or a web page returns,
written into memory the agent rereads later, steers every later session. Recording the sources lets the model see
what it rereads came from an untrusted place, and lets a person see it before it is shared.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict

Trust = Literal["untrusted", "vouched", "trusted"]
# import: brought in by `managed-tools memory import` from another memory server's file (its name and line)
SourceKind = Literal["tool", "session", "upstream", "agent", "file", "person", "import"]
RANK: dict[Trust, int] = {"untrusted": 0, "vouched": 1, "trusted": 2}
MAX_SOURCES = 24  # a version's record stays small; the oldest extra sources fold into the count


class Source(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: SourceKind
    name: str
    trust: Trust


class Provenance(BaseModel):
    """A version's sources, each once (by kind and name, at its lowest trust)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sources: tuple[Source, ...] = ()

    @property
    def trust(self) -> Trust:
        """The lowest trust of the sources; content recorded before provenance was kept counts as trusted."""
        return min((s.trust for s in self.sources), key=RANK.__getitem__, default="trusted")

    def merged(self, other: Provenance) -> Provenance:
        """Content made of both (an append): every source of either, each at its lowest trust."""
        lowest: dict[tuple[str, str], Source] = {}
        for source in (*self.sources, *other.sources):
            key = (source.kind, source.name)
            if key not in lowest or RANK[source.trust] < RANK[lowest[key].trust]:
                lowest[key] = source
        return Provenance(sources=tuple(lowest.values())[-MAX_SOURCES:])

    def vouched(self, by: str) -> Provenance:
        """A person approved this content with its sources shown: the untrusted ones become vouched."""
        kept = tuple(s.model_copy(update={"trust": "vouched"}) if s.trust == "untrusted" else s for s in self.sources)
        return Provenance(sources=kept).merged(Provenance(sources=(Source(kind="person", name=by, trust="trusted"),)))

    def to_json(self) -> str:
        return json.dumps([s.model_dump() for s in self.sources], separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> Provenance:
        return cls(sources=tuple(Source.model_validate(item) for item in json.loads(text or "[]")))
