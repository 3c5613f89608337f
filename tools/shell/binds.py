"""The workspace files a command line names to run, bound into its approval (issue 34, M1): a yes remembered for
`python3 run.py` is a yes to run.py as it was, so a rewrite of it asks again.

The command is read as plain words, the way rewrites.py reads a simple command (no `$`, backquotes, redirections,
subshells or line breaks), in simple commands joined by `&&`, `||`, `;`, `|` or `&`, with `cd DIR` followed and
leading `NAME=value` assignments skipped. In each, an allowlist of known forms names the files:

- a program named by a path (`./run.sh`, `bin/tool`), or by a bare name the shell's PATH finds in a mount (the
  workspace venv's `pytest`, a `node_modules/.bin` tool);
- an interpreter's script (`python3 run.py`, `node x.js`, `bash x.sh`, `perl`, `ruby`, `deno run`, `bun`), and
  Python's `-m pkg.mod` as the files Python would run for it under the cwd (`pkg/mod.py`, `pkg/mod/__init__.py`,
  `pkg/mod/__main__.py`, and each package's `__init__.py`);
- the build file of `make` (GNUmakefile, makefile, Makefile in its directory, or its `-f`), and of `just` and
  `npm run`/`npm test`/`npm install`/`bun run` (justfile, package.json: in the cwd and each parent up to the first
  that exists, where they look).

Anything else (shell syntax, an unknown flag, inline code such as `python3 -c` or `bash -c`) stops the reading and
says so: what was read is bound, the rest is not. Binding only ever adds to an approval's digest, so a command read
wrongly can ask more often, never less. What the bound files import, source or read is not covered.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import anyio

from managed_tools.sandbox.files import is_dir, sha256_file
from managed_tools.sandbox.fsaccess import FileAccessError
from managed_tools.sandbox.paths import PathError, PathGuard
from managed_tools.tools.framework.context.what_runs import BoundFile, WhatRuns
from managed_tools.tools.shell.posture import to_virtual

MAX_BOUND = 32  # files per command; past it the rest is not bound, and the question says so
UNREAD = re.compile(r"[$`\\(){}<>\n\r]")
SEPARATORS = frozenset(";&|")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
WRAPPERS = frozenset({"exec", "command", "time", "nohup"})
MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")  # the order GNU make looks for them
JUSTFILES = ("justfile", "Justfile", ".justfile")
NPM_RUNS = frozenset(
    {"run", "run-script", "rum", "urn", "test", "t", "tst", "start", "stop", "restart", "install", "i", "ci"}
)  # fmt: skip  (each runs package.json's scripts)
JS_SUFFIXES = ("", ".js", ".mjs", ".cjs", "/index.js")  # what node tries for a name without an extension
SCRIPT_SUFFIX = re.compile(r"\.[cm]?[jt]sx?$")


@dataclass
class Reading:
    """The command as read so far: the cwd it has reached (virtual) and the paths it names to run."""

    guard: PathGuard
    cwd: str
    shell_path: str  # the writable shell's PATH, where a bare program name is looked up
    paths: list[str] = field(default_factory=list)

    def path(self, name: str, base: str | None = None) -> str:
        virtual = posixpath.normpath(name if name.startswith("/") else posixpath.join(base or self.cwd, name))
        if self._mount(virtual) is None:
            virtual = to_virtual(self.guard, virtual) or virtual  # a host path typed into the command
        return virtual

    def name(self, name: str, base: str | None = None) -> str:
        virtual = self.path(name, base)
        self.paths.append(virtual)
        return virtual

    def state(self, virtual: str) -> str:
        """What stands at `virtual`: "file", "dir", "absent" or "outside" (never followed out of its mount)."""
        try:
            resolved = self.guard.resolve(virtual, "read")
        except PathError:
            return "outside"
        if not resolved.exists:
            return "absent"
        try:
            return "dir" if is_dir(resolved) else "file"
        except FileAccessError:
            return "outside"

    def upward(self, names: tuple[str, ...]) -> None:
        """`names` in the cwd and each parent within its mount, up to the first directory holding one."""
        at, top = self.cwd, self._mount(self.cwd)
        while True:
            found = [self.state(self.name(name, at)) == "file" for name in names]
            if top is None or at == top or any(found):
                return
            at = posixpath.dirname(at)

    def _mount(self, virtual: str) -> str | None:
        mounts = (m.mount_path for m in self.guard.mounts)
        return next((m for m in mounts if virtual == m or virtual.startswith(m + "/")), None)


@dataclass(frozen=True)
class Interpreter:
    """How an interpreter's options are spelled, so the first other word is known to be its script."""

    flags: str = ""  # letters that take no value (clustered: `-uB`); any other letter (`-c` code) is not read
    valued: str = ""  # letters that take a value, glued or the next word
    module: str = ""  # the letter naming a module to run (python -m)
    rest: str = ""  # letters that take the rest of their cluster, if any (perl -l0)
    longs: frozenset[str] = frozenset()  # long options that take no value
    long_valued: frozenset[str] = frozenset()  # long options that take a value (`--x=v` or the next word)
    any_long: bool = False  # every other `--name` or `--name=value` takes no separate value (deno)
    subcommand: str = ""  # the word that must come first (`deno run`)
    suffixes: tuple[str, ...] = ("",)  # the names it tries for a script without an extension


PYTHON = Interpreter(flags="bBdEhiIOqsSuvVxPR", valued="mWX", module="m")
SHELL = Interpreter(
    flags="abefhkmnptuvxBCEHPT", valued="oO",
    longs=frozenset({"--norc", "--noprofile", "--posix", "--login", "--noediting", "--restricted"}),
)  # fmt: skip
NODE_FLAGS = ("--inspect", "--inspect-brk", "--enable-source-maps", "--no-warnings", "--trace-warnings",
              "--no-deprecation", "--preserve-symlinks", "--watch")  # fmt: skip
NODE = Interpreter(
    longs=frozenset(NODE_FLAGS), long_valued=frozenset({"--stack-size", "--max-old-space-size"}), suffixes=JS_SUFFIXES
)
INTERPRETERS: dict[str, Interpreter] = {
    "python": PYTHON,
    "sh": SHELL,
    "node": NODE,
    "perl": Interpreter(flags="wWXTtcsnpaSUu", valued="IMm", rest="l0i"),
    "ruby": Interpreter(flags="wWvdcnpalsy", valued="Ir"),
    "deno": Interpreter(
        flags="Aq",
        valued="c",
        any_long=True,
        subcommand="run",
        suffixes=JS_SUFFIXES,
        long_valued=frozenset({"--config", "--import-map", "--lock", "--cert", "--location", "--seed"}),
    ),
}
FAMILIES = {
    re.compile(r"^(python([23](\.\d+)?)?|pypy3?)$"): "python",
    re.compile(r"^(ba|da|z|k|)sh$"): "sh",
    re.compile(r"^node(js)?$"): "node",
    re.compile(r"^perl(5)?$"): "perl",
    re.compile(r"^ruby$"): "ruby",
    re.compile(r"^deno$"): "deno",
    re.compile(r"^bun$"): "bun",
    re.compile(r"^g?make$"): "make",
    re.compile(r"^just$"): "just",
    re.compile(r"^npm$"): "npm",
}


async def bind(guard: PathGuard, shell_path: str, what: WhatRuns) -> WhatRuns:
    """`what` with the files its command names to run bound (hashed off the event loop: a program may be big)."""
    found, whole = await anyio.to_thread.run_sync(binds, guard, what.command, what.cwd, shell_path)
    return what.model_copy(update={"binds": found, "binds_whole": whole})


def binds(guard: PathGuard, command: str, cwd: str, shell_path: str = "") -> tuple[tuple[BoundFile, ...], bool]:
    """The files `command`, run in `cwd` (virtual) with the shell's PATH `shell_path`, names to run, each as it
    stands now; and whether the whole command was read (False: some of it may run files that are not bound)."""
    reading = Reading(guard, cwd, shell_path)
    whole = _read(reading, command)
    paths = list(dict.fromkeys(reading.paths))
    return tuple(bound(guard, path) for path in paths[:MAX_BOUND]), whole and len(paths) <= MAX_BOUND


def bound(guard: PathGuard, virtual: str) -> BoundFile:
    """A file as it stands: its SHA-256, absent, or outside (beyond the mounts, through a link out of one, or not
    a regular file). It is opened beneath its mount's root as `read` opens it, so no link leads out."""
    try:
        resolved = guard.resolve(virtual, "read")
    except PathError:
        return BoundFile(path=virtual, state="outside")
    if not resolved.exists:
        return BoundFile(path=resolved.virtual, state="absent")
    try:
        return BoundFile(path=resolved.virtual, state="file", sha256=sha256_file(resolved))
    except FileAccessError:
        return BoundFile(path=resolved.virtual, state="outside")


def _read(reading: Reading, command: str) -> bool:
    words = _simple_commands(command)
    if words is None:
        return False
    return all(_one(reading, simple) for simple in words)  # stops at the first not read


def _simple_commands(command: str) -> list[list[str]] | None:
    if UNREAD.search(command):
        return None
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote
        return None
    found: list[list[str]] = [[]]
    for token in tokens:
        if token and set(token) <= SEPARATORS:
            found.append([])
        else:
            found[-1].append(token)
    return [simple for simple in found if simple]


def _one(reading: Reading, words: list[str]) -> bool:
    while words and (ASSIGNMENT.match(words[0]) or words[0] in WRAPPERS):
        words = words[1:]
    if not words:
        return True
    program, rest = words[0], words[1:]
    if program == "cd":
        if len(rest) != 1 or rest[0].startswith(("-", "~")):
            return False
        reading.cwd = posixpath.normpath(posixpath.join(reading.cwd, rest[0]))
        return True
    if "/" in program:
        reading.name(program)
    elif (found := shutil.which(program, path=reading.shell_path)) is not None:
        virtual = to_virtual(reading.guard, found)  # the real file it runs, when that is in a mount
        if virtual is not None:
            reading.paths.append(virtual)
    family = next((name for pattern, name in FAMILIES.items() if pattern.match(posixpath.basename(program))), None)
    if family is None:
        return True
    if family in INTERPRETERS:
        return _interpreted(reading, INTERPRETERS[family], rest)
    return FORMS[family](reading, rest)


def _interpreted(reading: Reading, form: Interpreter, rest: list[str]) -> bool:
    if form.subcommand:
        if not rest or rest[0] != form.subcommand:
            return False
        rest = rest[1:]
    words = iter(rest)
    for word in words:
        if word == "--":
            return _script(reading, form, next(words, None))
        if word.startswith("--"):
            name, eq, _ = word.partition("=")
            if name in form.long_valued and not eq:
                next(words, None)
            elif not (name in form.longs or name in form.long_valued or form.any_long):
                return False
            continue
        if word == "-" or not word.startswith("-"):
            return word == "-" or _script(reading, form, word)  # `-`: stdin, nothing named
        read = _cluster(reading, form, word[1:], words)
        if read is not None:
            return read
    return True  # no script: a prompt or stdin


def _cluster(reading: Reading, form: Interpreter, letters: str, words: Iterator[str]) -> bool | None:
    """One `-abc` cluster: None to read on, else whether the command was read (a module ends it)."""
    for at, letter in enumerate(letters):
        if letter in form.rest:
            return None
        if letter in form.flags:
            continue
        value = letters[at + 1 :] or next(words, None)
        if letter not in form.valued or value is None:
            return False
        return _module(reading, value) if letter == form.module else None
    return None


def _script(reading: Reading, form: Interpreter, word: str | None) -> bool:
    if word is None:
        return True
    script = reading.name(word)
    if form is PYTHON and reading.state(script) == "dir":
        reading.name("__main__.py", script)  # python runs a directory's __main__.py
    if posixpath.splitext(word)[1] == "":
        for suffix in form.suffixes[1:]:
            reading.name(word + suffix)
    return True


def _module(reading: Reading, module: str) -> bool:
    if not MODULE.match(module):
        return False
    parts = module.split(".")
    for depth in range(1, len(parts)):
        reading.name(posixpath.join(*parts[:depth], "__init__.py"))
    path = posixpath.join(*parts)
    for name in (path + ".py", posixpath.join(path, "__init__.py"), posixpath.join(path, "__main__.py")):
        reading.name(name)
    return True


MAKE_FLAG = re.compile(r"-[ksnBiqw]+|-j\d*|--(jobs=\d+|keep-going|silent|quiet|no-print-directory|always-make|dry-run)")


def _make(reading: Reading, rest: list[str]) -> bool:
    files: list[str] = []
    base, at = reading.cwd, 0
    while at < len(rest):
        word, at = rest[at], at + 1
        if word == "-j" and at < len(rest) and rest[at].isdigit():
            at += 1
            continue
        flag, value = word, None
        if word in ("-f", "--file", "--makefile", "-C", "--directory") and at < len(rest):
            value, at = rest[at], at + 1
        elif word.startswith(("--file=", "--makefile=", "--directory=")):
            flag, _, value = word.partition("=")
        elif word.startswith(("-f", "-C")) and len(word) > 2:
            flag, value = word[:2], word[2:]
        elif word.startswith("-") and not MAKE_FLAG.fullmatch(word):
            return False
        if value is None:
            continue  # a known flag, a target or VAR=value
        if flag in ("-C", "--directory"):
            base = posixpath.normpath(posixpath.join(base, value))
        else:
            files.append(posixpath.join(base, value))
    for path in files or [posixpath.join(base, name) for name in MAKEFILES]:
        reading.name(path)
    return True


def _just(reading: Reading, rest: list[str]) -> bool:
    words = iter(rest)
    for word in words:
        if word in ("-f", "--justfile"):
            named = next(words, None)
            if named is None:
                return False
            reading.name(named)
            return True
        if word.startswith("--justfile="):
            reading.name(word.partition("=")[2])
            return True
        if word.startswith("-") and word not in ("-n", "--dry-run", "-q", "--quiet", "-v", "--verbose"):
            return False
    reading.upward(JUSTFILES)
    return True


def _npm(reading: Reading, rest: list[str]) -> bool:
    if not rest or rest[0] not in NPM_RUNS:
        return not rest or not rest[0].startswith("-")  # another subcommand runs no script of the project
    reading.upward(("package.json",))
    return True


def _bun(reading: Reading, rest: list[str]) -> bool:
    if rest and rest[0] == "run":
        rest = rest[1:]
    if not rest or rest[0].startswith("-") or rest[0] == "test":
        return False
    if "/" in rest[0] or SCRIPT_SUFFIX.search(rest[0]):
        return _script(reading, NODE, rest[0])
    reading.upward(("package.json",))  # a script of package.json
    return True


FORMS: dict[str, Callable[[Reading, list[str]], bool]] = {"make": _make, "just": _just, "npm": _npm, "bun": _bun}
