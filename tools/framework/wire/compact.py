"""The compact text form of list-shaped results (`serve --result-format compact`, docs/tool-search.md).

A result whose structured output holds a list (sessions, events, shell history, search hits, glob matches) is
written as one header line, `name[N] other=values: col1 | col2 | ...`, then one line per row, instead of the JSON
text: the keys are said once, not once per row (and a list of paths says their shared directory once). The
structured content is unchanged, so a client that reads it (and the output schema it validates) sees nothing
different; only what the model reads is shorter. A result without a list keeps its JSON text.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

ResultFormat = Literal["json", "compact"]
SEPARATOR = " | "


def _cell(value: Any) -> str:
    """One value on one line: a string as itself, anything else as compact JSON; `|` and newlines escaped."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("|", "\\|")


def _rows_field(structured: dict[str, Any]) -> str | None:
    """The output's list field (its longest, when there are several), or None."""
    lists = [(len(value), key) for key, value in structured.items() if isinstance(value, list)]
    return max(lists)[1] if lists else None


def compact_text(structured: dict[str, Any]) -> str | None:
    """The compact form of `structured`, or None when it holds no list."""
    field = _rows_field(structured)
    if field is None:
        return None
    rows: list[Any] = structured[field]
    rest = " ".join(f"{key}={_cell(value)}" for key, value in structured.items() if key != field)
    head = f"{field}[{len(rows)}]" + (f" {rest}" if rest else "")
    if rows and all(isinstance(row, dict) for row in rows):
        columns = list(dict.fromkeys(key for row in rows for key in row))
        lines = [SEPARATOR.join(_cell(row.get(column)) for column in columns) for row in rows]
        return "\n".join([f"{head}: {SEPARATOR.join(columns)}", *lines])
    prefix = _common_directory(rows)
    head += f" prefix={_cell(prefix)}" if prefix else ""
    return "\n".join([f"{head}:", *(_cell(row[len(prefix) :] if prefix else row) for row in rows)])


def _common_directory(rows: list[Any]) -> str:
    """The directory every row starts with, when the rows are paths (glob's matches): said once in the header."""
    if len(rows) < 2 or not all(isinstance(row, str) for row in rows):
        return ""
    try:
        shared = os.path.commonpath(rows).rstrip("/") + "/"
    except ValueError:  # absolute and relative paths mixed
        return ""
    return shared if shared != "/" and all(row.startswith(shared) for row in rows) else ""
