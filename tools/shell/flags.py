"""What each program behind `bash` may be given: the exact flag spellings (an allowlist), their values, and what
its operands are. tools/shell/argv.py parses against these tables; anything not written here is refused.

The tables describe GNU coreutils. Left out on purpose: whatever follows or waits (tail -f/-F/--follow/--pid/
--retry/-s), recurses (ls -R), reads a list of files (wc --files0-from), dereferences links to outside files
(ls -L/-H, stat -L), reveals the host (ls --hyperlink prints file://HOSTNAME/host/path, stat -f, stat's %m mount
point) or prints editor offsets (ls -D).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Value:
    hint: str  # how messages name it: N, WORD, PATTERN
    check: Callable[[str], bool]
    choices: tuple[str, ...] = ()
    is_path: bool = False  # checked by the path guard and replaced by the real path


@dataclass(frozen=True)
class Flag:
    short: str = ""  # one letter, or "" when there is no short spelling
    long: tuple[str, ...] = ()  # long names without "--"; the first is the one the program is given
    value: Value | None = None  # None: takes no value
    optional: bool = False  # the value may only be glued (`--color=always`); the short spelling takes none

    def __post_init__(self) -> None:
        if self.optional and not self.long:
            raise ValueError("An optional value needs a long name: the program is only given --name=VALUE.")


@dataclass(frozen=True)
class Program:
    flags: tuple[Flag, ...] = ()
    operands: Literal["none", "paths", "names"] = "paths"  # names: plain text the program never opens
    access: Literal["read", "list"] = "read"
    in_vault: bool = False  # vaults allow listing only
    digits: str = ""  # `-NUM` is short for --<digits>=NUM (head -5)
    reads: bool = False  # opens its operands for their content: only regular files (a FIFO would hold it)
    operands_help: str = ""  # how refusals describe the operands, when not as paths or names

    def spellings(self) -> str:
        return ", ".join(_spelling(f) for f in self.flags)


def _spelling(flag: Flag) -> str:
    names = ([f"-{flag.short}"] if flag.short else []) + [f"--{name}" for name in flag.long]
    text = "/".join(names)
    if flag.value is None:
        return text
    hint = "|".join(flag.value.choices) if flag.value.choices else flag.value.hint
    return f"{text}[={hint}]" if flag.optional else f"{text}={hint}"


def matches(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda value: compiled.fullmatch(value) is not None


def enum(*choices: str) -> Value:
    return Value("WORD", lambda value: value in choices, choices)


def count(signs: str) -> Value:
    """A line or byte count with the GNU unit suffixes (5, 5K, 1MiB), signed as the program allows."""
    return Value(f"[{signs}]N", matches(rf"[{re.escape(signs)}]?[0-9]{{1,18}}(b|kB|K|KiB|MB|M|MiB|GB|G|GiB)?"))


# stat's %m prints the mount point the file is on: a host path outside the mount.
_DIRECTIVE = re.compile(r"%[-#+ 0'I]*[0-9]*(?:\.[0-9]*)?(.)?", re.DOTALL)


def _stat_format(value: str) -> bool:
    return all(m.group(1) != "m" for m in _DIRECTIVE.finditer(value))


COLS = Value("N", matches(r"[0-9]{1,4}"))
TEXT = Value("TEXT", lambda value: True)  # NUL bytes are refused for every argument
PATH = Value("PATH", lambda value: True, is_path=True)
FORMAT = Value("FORMAT (any text but %m)", _stat_format)
_UNIT = r"(?:[KMGTPEZY](?:iB|B)?|kB)"
SIZE = Value("SIZE", matches(rf"human-readable|si|[0-9]{{1,15}}{_UNIT}?|{_UNIT}"))
TIME_STYLE = Value("full-iso|long-iso|iso|locale|+FORMAT", matches(r"full-iso|long-iso|iso|locale|\+(?s:.*)"))
WHEN = enum("always", "auto", "never")
LS_FORMAT = enum("across", "commas", "horizontal", "long", "single-column", "verbose", "vertical")
QUOTING = enum("literal", "locale", "shell", "shell-always", "shell-escape", "shell-escape-always", "c", "escape")


def no_value(*spellings: str) -> tuple[Flag, ...]:
    """`"a all"` is -a/--all; `"c"` is -c alone; `"-file-type"` is --file-type alone."""
    flags = []
    for spelling in spellings:
        short, *long = spelling.split()
        if short.startswith("-"):
            short, long = "", [short[1:], *long]
        flags.append(Flag(short=short, long=tuple(long)))
    return tuple(flags)


PROGRAMS: dict[str, Program] = {
    "pwd": Program(operands="none", in_vault=True),
    "env": Program(operands="none"),  # `env CMD` would run CMD
    "ls": Program(
        flags=(
            *no_value("a all", "A almost-all", "-author", "b escape", "B ignore-backups", "c", "C", "d directory"),
            *no_value("f", "-file-type", "-full-time", "g", "-group-directories-first", "G no-group"),
            *no_value("h human-readable", "-si", "i inode", "k kibibytes", "l", "m", "n numeric-uid-gid"),
            *no_value("N literal", "o", "p", "q hide-control-chars", "-show-control-chars", "Q quote-name"),
            *no_value("r reverse", "s size", "S", "t", "u", "U", "v", "x", "X", "Z context", "-zero", "1"),
            Flag("F", ("classify",), WHEN, optional=True),
            Flag("", ("color",), WHEN, optional=True),
            Flag("I", ("ignore",), Value("PATTERN", TEXT.check)),
            Flag("", ("hide",), Value("PATTERN", TEXT.check)),
            Flag("w", ("width",), COLS),
            Flag("T", ("tabsize",), COLS),
            Flag("", ("format",), LS_FORMAT),
            Flag("", ("sort",), enum("none", "size", "time", "version", "extension", "width")),
            Flag("", ("time",), enum("atime", "access", "use", "ctime", "status", "birth", "creation")),
            Flag("", ("time-style",), TIME_STYLE),
            Flag("", ("block-size",), SIZE),
            Flag("", ("quoting-style",), QUOTING),
            Flag("", ("indicator-style",), enum("none", "slash", "file-type", "classify")),
        ),
        access="list",
        in_vault=True,
    ),
    "cat": Program(
        flags=no_value("A show-all", "b number-nonblank", "e", "E show-ends", "n number", "s squeeze-blank", "t")
        + no_value("T show-tabs", "u", "v show-nonprinting"),
        reads=True,
    ),
    "head": Program(
        flags=(
            Flag("n", ("lines",), count("-")),
            Flag("c", ("bytes",), count("-")),
            *no_value("q quiet silent", "v verbose", "z zero-terminated"),
        ),
        digits="lines",
        reads=True,
    ),
    "tail": Program(
        flags=(
            Flag("n", ("lines",), count("+-")),
            Flag("c", ("bytes",), count("+-")),
            *no_value("q quiet silent", "v verbose", "z zero-terminated"),
        ),
        digits="lines",
        reads=True,
    ),
    "wc": Program(flags=no_value("c bytes", "m chars", "l lines", "L max-line-length", "w words"), reads=True),
    "basename": Program(
        flags=(Flag("s", ("suffix",), Value("SUFFIX", TEXT.check)), *no_value("a multiple", "z zero")),
        operands="names",
    ),
    "dirname": Program(flags=no_value("z zero"), operands="names"),
    "realpath": Program(
        flags=(
            *no_value("e canonicalize-existing", "m canonicalize-missing", "L logical", "P physical", "q quiet"),
            *no_value("s strip no-symlinks", "z zero"),
            Flag("", ("relative-to",), PATH),
            Flag("", ("relative-base",), PATH),
        ),
    ),
    "stat": Program(
        flags=(Flag("c", ("format",), FORMAT), Flag("", ("printf",), FORMAT), *no_value("t terse")),
    ),
}
