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
    hidden: int  # diff lines (changed or context) left out by `max_lines`


def _show(line: str) -> list[str]:
    body = line.rstrip("\n")
    shown = body if len(body) <= DIFF_LINE_CHARS else body[: DIFF_LINE_CHARS - 1] + "…"
    return [shown] if line.endswith("\n") else [shown, "\\ No newline at end of file"]


def line_diff(old: str, new: str, old_name: str, new_name: str, max_lines: int) -> Diff:
    """A real line diff (difflib's longest matching blocks, not positions), as unified hunks from old to new.

    `max_lines` counts the lines of the diff itself (changed and context); the file and hunk headers they need
    come on top, and the context shrinks to fit, so a preview of one line still shows a change."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, a, b)
    differing = added = removed = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            differing += max(i2 - i1, j2 - j1)
            removed += i2 - i1
            added += j2 - j1
    hunks: list[tuple[str, list[str]]] = []
    for group in matcher.get_grouped_opcodes(min(DIFF_CONTEXT, (max_lines - 1) // 2)):
        first, last = group[0], group[-1]
        body: list[str] = []
        for kind, i1, i2, j1, j2 in group:
            if kind == "equal":
                body += [s for line in a[i1:i2] for s in _show(" " + line)]
                continue
            body += [s for line in a[i1:i2] for s in _show("-" + line)]
            body += [s for line in b[j1:j2] for s in _show("+" + line)]
        hunks.append((f"@@ -{_span(first[1], last[2])} +{_span(first[3], last[4])} @@", body))
    lines: list[str] = [f"--- {old_name}", f"+++ {new_name}"] if differing else []
    budget = max_lines
    for header, body in hunks:
        if budget <= 0:
            break
        lines += [header, *body[:budget]]
        budget -= len(body)
    total = sum(len(body) for _, body in hunks)
    return Diff(differing, added, removed, lines, max(0, total - max_lines))


def _span(start: int, stop: int) -> str:
    """A unified-diff range: 1-based start, and the length unless it is 1 (an empty range names the line before)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"
