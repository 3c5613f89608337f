"""A real line diff (difflib's longest matching blocks, not positional), shown as bounded unified hunks."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

DIFF_CONTEXT = 2
DIFF_LINE_CHARS = 200


@dataclass(frozen=True)
class Diff:
    differing: int  # lines that differ, a changed line counted once
    added: int
    removed: int
    lines: list[str]  # unified diff, every line clipped
    total_lines: int


def _show(line: str) -> list[str]:
    body = line.rstrip("\n")
    shown = body if len(body) <= DIFF_LINE_CHARS else body[: DIFF_LINE_CHARS - 1] + "…"
    return [shown] if line.endswith("\n") else [shown, "\\ No newline at end of file"]


def line_diff(old: str, new: str, old_name: str, new_name: str, max_lines: int) -> Diff:
    """A real line diff (difflib's longest matching blocks, not positions), as unified hunks from old to new."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, a, b)
    differing = added = removed = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            differing += max(i2 - i1, j2 - j1)
            removed += i2 - i1
            added += j2 - j1
    lines: list[str] = [f"--- {old_name}", f"+++ {new_name}"] if differing else []
    for group in matcher.get_grouped_opcodes(DIFF_CONTEXT):
        first, last = group[0], group[-1]
        lines.append(f"@@ -{_span(first[1], last[2])} +{_span(first[3], last[4])} @@")
        for kind, i1, i2, j1, j2 in group:
            if kind == "equal":
                lines += [s for line in a[i1:i2] for s in _show(" " + line)]
                continue
            lines += [s for line in a[i1:i2] for s in _show("-" + line)]
            lines += [s for line in b[j1:j2] for s in _show("+" + line)]
    return Diff(differing, added, removed, lines[:max_lines], len(lines))


def _span(start: int, stop: int) -> str:
    """A unified-diff range: 1-based start, and the length unless it is 1 (an empty range names the line before)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"
