"""Printing for a person at a terminal: columns cut to the window's width, colour only on a TTY (and never under
NO_COLOR), a pager only when the text is longer than the window. Redirected output is plain and whole."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

_STYLES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


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
        return line if not self.width or len(line) <= self.width else line[: self.width - 1] + "…"

    def show(self, text: str) -> None:
        """Print `text`; on a terminal, through $PAGER (`less -FRX`) when it does not fit the window."""
        if self.tty and text.count("\n") + 1 >= self.height and (pager := _pager()) is not None:
            env = {**os.environ, "LESS": os.environ.get("LESS", "FRX")}
            try:
                subprocess.run(pager, input=text, text=True, env=env, check=False)
                return
            except OSError:
                pass  # a pager that cannot start: print instead
        print(text)


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
    widths = [max([len(c.heading), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    if screen.width:
        over = sum(widths) + 2 * (len(widths) - 1) - screen.width
        for i, column in enumerate(columns):
            if over > 0 and column.flexible:
                keep = max(len(column.heading), widths[i] - over, 8)
                over -= widths[i] - keep
                widths[i] = keep

    def line(values: Sequence[str]) -> str:
        fitted = [_fit(v, widths[i]).ljust(widths[i]) for i, v in enumerate(values)]
        return screen.cut("  ".join(fitted).rstrip())

    heading = screen.style(line([c.heading for c in columns]), "bold")
    return "\n".join([heading, *(line(row) for row in cells)])


def _fit(value: str, width: int) -> str:
    return value if len(value) <= width else value[: max(width - 1, 0)] + "…"


def more(shown: int, total: int) -> str | None:
    """The line that says rows were left out, and how to see them."""
    if total <= shown:
        return None
    return f"… {total - shown} more (--limit N shows more)"
