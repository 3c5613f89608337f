"""What differs between the SQL of SQLite and PostgreSQL, named once.

Stores write SQL both engines read alike (`ON CONFLICT ... DO NOTHING/UPDATE`, `RETURNING`, aliased subqueries,
ISO-8601 text times) with `?` placeholders; the few expressions that are spelled differently come from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Dialect:
    name: Literal["sqlite", "postgresql"]

    def json_text(self, column: str, key: str) -> str:
        """A top-level string member of a JSON text column (NULL when absent)."""
        _check_key(key)
        if self.name == "sqlite":
            return f"json_extract({column}, '$.{key}')"
        # `json`, not `jsonb`: it parses without rejecting the \u0000 escapes a payload may hold.
        return f"({column}::json ->> '{key}')"

    def json_int(self, column: str, key: str) -> str:
        """A top-level integer member of a JSON text column (NULL when absent)."""
        if self.name == "sqlite":
            return self.json_text(column, key)
        return f"({self.json_text(column, key)})::bigint"


def _check_key(key: str) -> None:
    if not key.isidentifier():
        raise ValueError(f"not a JSON key this layer quotes: {key!r}")


SQLITE = Dialect("sqlite")
POSTGRESQL = Dialect("postgresql")


def placeholders(sql: str) -> str:
    """`?` placeholders as PostgreSQL's `$1, $2, ...`, leaving quoted text and identifiers alone."""
    out: list[str] = []
    quote: str | None = None
    number = 0
    for char in sql:
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "?":
            number += 1
            out.append(f"${number}")
            continue
        out.append(char)
    return "".join(out)
