"""What a person approves when a tool runs a command: the whole command, its cwd and its env, shown so that
nothing is hidden, and bound into the approval digest so that a later change needs a new yes.

`visible` is the one rendering of model text for a person (the question, `managed-tools pending`, `approve`):
only printable characters pass through as they are; everything else (control, format, bidi, zero-width, line
and paragraph separators, unusual spaces) is written as ⟨U+XXXX⟩, and long runs of spaces or line breaks are
counted (⟨4200 spaces⟩), so no payload hides behind them.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from pydantic import BaseModel, ConfigDict

MAX_SHOWN_COMMAND_CHARS = 4000  # the command as shown; with the env below, the question stays whole everywhere
MAX_SHOWN_ENV_CHARS = 4000
SPACE_RUN = 8  # this many spaces or more in a row are counted instead of shown
BREAK_RUN = 3  # this many line breaks or more in a row are counted
# Printable, yet invisible or blank: fillers and selectors that str.isprintable() lets through.
INVISIBLE = frozenset({0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0})
INVISIBLE_RANGES = ((0xFE00, 0xFE0F), (0xE0100, 0xE01EF), (0x180B, 0x180F))
NAMED = {"\t": "⟨TAB⟩", "\r": "⟨CR⟩", "\x1b": "⟨ESC⟩"}
MARKERS = frozenset("⟨⟩⏎")  # our own marks, escaped when the text itself contains them
_RUN = re.compile(rf" {{{SPACE_RUN},}}|\n{{{BREAK_RUN},}}")

# A name is secret-looking when one of its `_`-separated parts is one of these, or ends with one of the
# suffixes (GITHUBTOKEN, DB_PASSWORD). Only the name of such a variable is shown; its value is still bound.
SECRET_PARTS = frozenset(
    {"TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASS", "PWD", "KEY", "KEYS", "APIKEY",
     "CREDENTIAL", "CREDENTIALS", "CRED", "CREDS", "AUTH", "COOKIE", "COOKIES", "SESSION", "PRIVATE", "SIGNATURE",
     "SALT", "DSN", "BEARER", "OTP", "PIN"}
)  # fmt: skip
SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIALS", "COOKIE")


def _hidden(char: str) -> bool:
    code = ord(char)
    if not char.isprintable() or code in INVISIBLE or char in MARKERS:
        return True
    return any(low <= code <= high for low, high in INVISIBLE_RANGES) or unicodedata.category(char) == "Cf"


def _escape(char: str) -> str:
    if char == "\n":
        return "⏎\n"
    if char in NAMED:
        return NAMED[char]
    return f"⟨U+{ord(char):04X}⟩" if _hidden(char) else char


def visible(text: str, indent: str = "") -> str:
    """`text` as a person must see it: every character accounted for, each line break shown as ⏎ and followed
    by `indent`."""
    out: list[str] = []
    at = 0
    for run in _RUN.finditer(text):
        out.extend(_escape(c) for c in text[at : run.start()])
        size = run.end() - run.start()
        out.append(f"⟨{size} spaces⟩" if run.group()[0] == " " else f"⟨{size} line breaks⟩⏎\n")
        at = run.end()
    out.extend(_escape(c) for c in text[at:])
    return "".join(out).replace("\n", "\n" + indent)


def visible_lines(text: str) -> str:
    """Text whose line breaks are its own layout (a JSON dump, a diff, a tool's preview): each line made visible,
    the breaks kept as they are."""
    return "\n".join(visible(line) for line in text.split("\n"))


def secret_looking(name: str) -> bool:
    parts = name.upper().split("_")
    return any(part in SECRET_PARTS or part.endswith(SECRET_SUFFIXES) for part in parts)


class TooLongToShow(ValueError):
    """A command or env a person could not see whole in a question; the message says what to do instead."""


class BoundFile(BaseModel):
    """A workspace file the command names to run, as it stood when the approval was asked: its SHA-256, absent
    (creating it changes what runs), or outside (outside the workspace, or a link out of it: not bound)."""

    model_config = ConfigDict(frozen=True)

    path: str
    state: Literal["file", "absent", "outside"]
    sha256: str | None = None

    def shown(self) -> str:
        if self.state == "file":
            return f"{visible(self.path)} (sha256 {self.sha256})"
        if self.state == "absent":
            return f"{visible(self.path)} (absent: creating it asks again)"
        return f"{visible(self.path)} (outside the workspace or not a regular file: not bound)"


def changed_files(before: tuple[BoundFile, ...], now: tuple[BoundFile, ...]) -> list[str]:
    """The paths whose bound content differs between two bindings of the same command."""
    old = {bound.path: bound for bound in before}
    return [bound.path for bound in now if old.get(bound.path) != bound]


class WhatRuns(BaseModel):
    """Everything a shell tool's approval covers. `env` is the env set with shell_set_env (names and values);
    `shell_names` the names a live persistent shell exported by itself (their values are not tracked);
    `proxy_names` those the server sets for its egress proxy; `binds`
    the workspace files the command line names to run (tools/shell/binds.py), `binds_whole` False when some of
    the command could not be read for them."""

    model_config = ConfigDict(frozen=True)

    runner: str
    command: str
    cwd: str
    env: dict[str, str]
    shell_names: tuple[str, ...] = ()
    proxy_names: tuple[str, ...] = ()
    binds: tuple[BoundFile, ...] = ()
    binds_whole: bool = True

    def render(self) -> str:
        """The question's core; raises TooLongToShow when it cannot be shown whole."""
        command = visible(self.command, "    ")
        if len(command) > MAX_SHOWN_COMMAND_CHARS:
            raise TooLongToShow(
                f"The command is {len(command)} characters as shown to a person; a permission question shows at "
                f"most {MAX_SHOWN_COMMAND_CHARS} so it can be read whole. Write the script to a file (write) and "
                "run that file instead."
            )
        env = "\n".join(f"    {line}" for line in self._env_lines())
        if len(env) > MAX_SHOWN_ENV_CHARS:
            raise TooLongToShow(
                f"The env set with shell_set_env is {len(env)} characters as shown to a person; a permission "
                f"question shows at most {MAX_SHOWN_ENV_CHARS}. Remove what the command does not need with "
                "shell_unset_env."
            )
        lines = [f"Command, run {self.runner}:", f"    {command}", f"Working directory: {visible(self.cwd)}"]
        if self.env:  # none set: the fixed minimal env alone, nothing for a person to judge
            lines += [
                "Environment set with shell_set_env (on top of a fixed minimal env: PATH, LANG, HOME, TMPDIR, "
                "private caches):"
            ]
            lines += [env]
        if self.shell_names:
            names = ", ".join(visible(name) for name in self.shell_names)
            lines += [f"Also exported inside the live shell by earlier commands (values not shown): {names}"]
        if self.proxy_names:
            names = ", ".join(self.proxy_names)
            lines += [f"Set by the server, pointing at its egress proxy (the domain allowlist): {names}"]
        if self.binds:
            lines += ["Binds the content of the files it runs (a change to one asks again; what they import, source "
                      "or read is not covered):"]  # fmt: skip
            lines += [f"    {bound.shown()}" for bound in self.binds]
        if not self.binds_whole:
            lines += ["Some of the command (shell syntax such as $, `, <, >, ( or a line break, or a form not read) "
                      "was not read for the files it runs: those files are not bound."]  # fmt: skip
        return "\n".join(lines)

    def _env_lines(self) -> list[str]:
        return [
            f"{visible(name)} (value not shown: secret-looking name)"
            if secret_looking(name)
            else f"{visible(name)}={visible(value, '        ')}"
            for name, value in sorted(self.env.items())
        ]
