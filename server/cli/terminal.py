"""Printing for a person at a terminal: columns cut to the window's width, colour only on a TTY (and never under
NO_COLOR), a pager only when the text is longer than the window. Redirected output is plain and whole."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

_STYLES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
_CODE = re.compile(r"\x1b\[[0-9;]*m")  # what style() adds: takes no column on the screen
SHORT_ID = 8  # the fewest characters of an id a table shows


def visible(text: str) -> int:
    """How many columns `text` takes on a terminal (its colour codes take none)."""
    return len(_CODE.sub("", text))


def fit(text: str, width: int) -> str:
    """`text` cut to `width` visible columns, ending in an ellipsis when cut; its colour codes kept (and closed)."""
    if visible(text) <= width:
        return text
    out, left = [], max(width - 1, 0)
    for piece in re.split(f"({_CODE.pattern})", text):
        if _CODE.fullmatch(piece):
            out.append(piece)
        elif left:
            out.append(piece[:left])
            left -= len(out[-1])
    coloured = any(_CODE.fullmatch(piece) for piece in out)
    return "".join(out) + "…" + ("\x1b[0m" if coloured else "")


def short_ids(ids: Sequence[str]) -> dict[str, str]:
    """Each id's shortest prefix (SHORT_ID characters or more) that no other of `ids` starts with, as git shortens
    hashes. A UUIDv7 begins with its millisecond clock, so ids made in the same minute share their first 8
    characters: theirs grow into the clock's later digits until they differ."""
    ordered = sorted(set(ids))
    shared = dict.fromkeys(ordered, 0)
    for a, b in itertools.pairwise(ordered):
        common = next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        shared[a], shared[b] = max(shared[a], common), max(shared[b], common)
    return {i: i[: max(SHORT_ID, shared[i] + 1)] for i in ordered}


@dataclass(frozen=True)
class Screen:
    """Where the text goes: a terminal (width, height, colour) or a pipe or file (no limit, no colour)."""

    tty: bool
    width: int
    height: int
    colour: bool

    @classmethod
    def now(cls) -> Screen:
        tty = sys.stdout.isatty()
        if not tty:
            return cls(tty=False, width=0, height=0, colour=False)
        size = shutil.get_terminal_size()
        colour = "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        return cls(tty=True, width=max(size.columns, 40), height=size.lines, colour=colour)

    def style(self, text: str, style: str) -> str:
        return f"\x1b[{_STYLES[style]}m{text}\x1b[0m" if self.colour and text else text

    def cut(self, line: str) -> str:
        """A line no wider than the window (whole when not on a terminal)."""
        return line if not self.width else fit(line, self.width)

    def show_lines(self, said: list[str]) -> None:
        """Lines for a person: on a terminal wrapped to the window (a question is read whole) and paged."""
        self.show("\n".join(said))

    def show(self, text: str) -> None:
        """Print `text`; on a terminal, each line wider than the window wrapped (indented under its start) and the
        whole through $PAGER (`less -FRX`) when it does not fit the window."""
        if self.width:
            text = "\n".join(self._wrapped(line) for line in text.split("\n"))
        if self.tty and text.count("\n") + 1 >= self.height and (pager := _pager()) is not None:
            env = {**os.environ, "LESS": os.environ.get("LESS", "FRX")}
            try:
                subprocess.run(pager, input=text, text=True, env=env, check=False)
                return
            except OSError:
                pass  # a pager that cannot start: print instead
        print(text)

    def _wrapped(self, line: str) -> str:
        if visible(line) <= self.width:
            return line
        indent = " " * min(len(line) - len(line.lstrip(" ")) + 2, self.width // 2)
        return "\n".join(textwrap.wrap(line, self.width, subsequent_indent=indent, break_on_hyphens=False))


def _pager() -> list[str] | None:
    words = shlex.split(os.environ.get("PAGER", "less"))
    if not words or words[0] == "cat":
        return None
    return words if shutil.which(words[0]) else None


@dataclass(frozen=True)
class Column:
    """A table's column: its heading, and whether it gives up width first (the widest free-text column does)."""

    heading: str
    flexible: bool = False


def table(screen: Screen, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> str:
    """Rows under a heading, columns padded; on a terminal a flexible column is cut so each line fits."""
    cells = [[cell.replace("\n", " ") for cell in row] for row in rows]
    widths = [max([len(c.heading), *(visible(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    if screen.width:
        over = sum(widths) + 2 * (len(widths) - 1) - screen.width
        for i, column in enumerate(columns):
            if over > 0 and column.flexible:
                keep = max(len(column.heading), widths[i] - over, 8)
                over -= widths[i] - keep
                widths[i] = keep

    def line(values: Sequence[str]) -> str:
        fitted = [(cut := fit(v, widths[i])) + " " * (widths[i] - visible(cut)) for i, v in enumerate(values)]
        return screen.cut("  ".join(fitted).rstrip())

    heading = screen.style(line([c.heading for c in columns]), "bold")
    return "\n".join([heading, *(line(row) for row in cells)])


def more(shown: int, total: int) -> str | None:
    """The line that says rows were left out, and how to see them."""
    if total <= shown:
        return None
    return f"… {total - shown} more (--limit N shows more)"
