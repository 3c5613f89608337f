"""What `bash git` may be given: the subcommands, each one's exact flag spellings (an allowlist, as flags.py has
for coreutils), and the flags every run of it gets whatever the model wrote.

Left out on purpose: whatever writes (`--output`, `branch` without `--list`), runs a program (`--ext-diff`,
`--textconv`, `--show-signature`, the `%G` and `%(describe)` placeholders, `-c`, `--exec-path`, `--upload-pack`),
points git at other files (`--git-dir`, `--work-tree`, `--ignore-revs-file`, `--exclude-from`, `--no-index`),
recurses into submodules (each has a config of its own) or follows a pager. tools/shell/git.py does the rest: the
repository must lie inside the mount, and git runs with a fixed environment that disables every program a
repository's config may name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from managed_tools.tools.shell.flags import COLS, TEXT, WHEN, Flag, Program, Value, enum, matches, no_value

# A revision as a model writes one (HEAD~2, main..topic, v1.0^{tree}, HEAD:src/a.py, :/fix): never a flag, never
# a path from the root or a relative climb (rev-parse would say whether such a file exists), no control characters.
REVISION = re.compile(r"[^-/.\x00-\x1f\x7f][^\x00-\x1f\x7f]{0,255}")
REV = Value("REV", lambda value: REVISION.fullmatch(value) is not None)
COUNT = Value("N", matches(r"[0-9]{1,9}"))
DATE = Value("DATE", TEXT.check)
PATTERN = Value("PATTERN", TEXT.check)
DATE_FORMAT = Value(
    "relative|local|iso|iso-strict|rfc|short|raw|human|unix|default|format:...",
    matches(r"(?:relative|local|iso|iso8601|iso-strict|iso8601-strict|rfc|rfc2822|short|raw|human|unix|default)"
             r"(?:-local)?|format(?:-local)?:(?s:.*)"),
)  # fmt: skip
_BUILTIN_FORMATS = ("oneline", "short", "medium", "full", "fuller", "reference", "email", "raw")
# The placeholders of `git log --format` that only print what the commit holds. %G runs gpg (signatures),
# %(describe) runs `git describe`; a bare word names a `pretty.<name>` alias from the repository's config. None of
# these is listed. A +, - or space between % and a placeholder only changes the line breaks around it.
_PLACEHOLDER = re.compile(
    r"%(?:%|n|x[0-9a-fA-F]{2}|[-+ ]?(?:[mHhTtPpdDSeEsfbBN]|[ac][nNeElLdDrtiIsh]"
    r"|C(?:red|green|blue|reset|\([a-z ,]{0,40}\))|w\([0-9, ]{0,20}\)|(?:<|>|><|>>)\|?\([0-9a-z, ]{0,20}\)"
    r"|\(trailers(?::[A-Za-z0-9=,:-]{0,80})?\)))"
)


def _format(value: str) -> bool:
    if value in _BUILTIN_FORMATS:
        return True
    text = value.removeprefix("format:").removeprefix("tformat:")
    if text == value and "%" not in value:
        return False
    at = text.find("%")
    while at != -1:
        placeholder = _PLACEHOLDER.match(text, at)
        if placeholder is None:
            return False
        at = text.find("%", placeholder.end())
    return True


FORMAT = Value(f"{'|'.join(_BUILTIN_FORMATS)}|format:...(no %G, no %(describe))", _format)

_DIFF_OUTPUT = (
    *no_value("p patch", "u", "s no-patch", "-raw", "-patch-with-raw", "-patch-with-stat", "-numstat", "-shortstat"),
    *no_value("-summary", "-name-only", "-name-status", "-full-index", "-binary", "-no-color", "-no-renames"),
    *no_value("w ignore-all-space", "b ignore-space-change", "-ignore-blank-lines", "-ignore-space-at-eol"),
    *no_value("-ignore-cr-at-eol", "-minimal", "-patience", "-histogram", "W function-context", "-no-prefix"),
    *no_value("R", "a text", "-exit-code", "-quiet", "-check", "-compact-summary"),
    Flag("U", ("unified",), COUNT),
    Flag("", ("stat",), Value("WIDTH", matches(r"[0-9]{1,4}(?:,[0-9]{1,4}){0,2}")), optional=True),
    Flag("", ("abbrev",), COUNT, optional=True),
    Flag("", ("color",), WHEN, optional=True),
    Flag("", ("word-diff",), enum("color", "plain", "porcelain", "none"), optional=True),
    Flag("M", ("find-renames",), Value("N[%]", matches(r"[0-9]{1,3}%?")), optional=True),
    Flag("", ("diff-filter",), Value("ACDMRTUXB*", matches(r"[ACDMRTUXBacdmrtuxb*]{1,20}"))),
    Flag("", ("diff-algorithm",), enum("default", "myers", "minimal", "patience", "histogram")),
)
_LOG_FORMAT = (
    *no_value("-oneline", "-abbrev-commit", "-no-abbrev-commit", "-no-decorate", "-source", "-use-mailmap"),
    Flag("", ("format",), FORMAT),
    Flag("", ("pretty",), FORMAT, optional=True),
    Flag("", ("date",), DATE_FORMAT),
    Flag("", ("decorate",), enum("short", "full", "auto", "no"), optional=True),
)
_LOG_WALK = (
    *no_value("-all", "-graph", "-first-parent", "-merges", "-no-merges", "-reverse", "-topo-order", "-date-order"),
    *no_value("-author-date-order", "-follow", "-parents", "-children", "-left-right", "-boundary", "-full-history"),
    *no_value("-simplify-by-decoration", "-ancestry-path", "-cherry-pick", "-cherry-mark", "-all-match"),
    *no_value("-invert-grep", "i regexp-ignore-case", "E extended-regexp", "F fixed-strings"),
    Flag("n", ("max-count",), COUNT),
    Flag("", ("skip",), COUNT),
    Flag("", ("since", "after"), DATE),
    Flag("", ("until", "before"), DATE),
    Flag("", ("author",), PATTERN),
    Flag("", ("committer",), PATTERN),
    Flag("", ("grep",), PATTERN),
)

Operands = Literal["paths", "revisions-then-paths", "blame", "revisions", "patterns"]
_REVS_AND_PATHS = "other arguments are revisions (existing files count as paths), and every argument after -- is a path"


@dataclass(frozen=True)
class Subcommand:
    program: Program
    operands: Operands
    forced: tuple[str, ...] = ()  # given on every run, before what the model wrote


SUBCOMMANDS: dict[str, Subcommand] = {
    "status": Subcommand(
        Program(
            flags=(
                *no_value("s short", "b branch", "-long", "z", "-show-stash", "-ahead-behind", "-no-ahead-behind"),
                *no_value("-renames", "-no-renames"),
                Flag("", ("porcelain",), enum("v1", "v2"), optional=True),
                Flag("u", ("untracked-files",), enum("no", "normal", "all"), optional=True),
                Flag("", ("ignored",), enum("traditional", "no", "matching"), optional=True),
                Flag("", ("find-renames",), Value("N[%]", matches(r"[0-9]{1,3}%?")), optional=True),
            ),
        ),
        "paths",
        forced=("--ignore-submodules=all",),
    ),
    "diff": Subcommand(
        Program(
            flags=(*_DIFF_OUTPUT, *no_value("-cached", "-staged", "-merge-base")),
            operands_help=_REVS_AND_PATHS,
        ),
        "revisions-then-paths",
        forced=("--no-ext-diff", "--no-textconv", "--ignore-submodules=all"),
    ),
    "log": Subcommand(
        Program(flags=(*_LOG_WALK, *_LOG_FORMAT, *_DIFF_OUTPUT), digits="max-count", operands_help=_REVS_AND_PATHS),
        "revisions-then-paths",
        forced=("--no-ext-diff", "--no-textconv"),
    ),
    "show": Subcommand(
        Program(flags=(*_LOG_FORMAT, *_DIFF_OUTPUT), operands_help=_REVS_AND_PATHS),
        "revisions-then-paths",
        forced=("--no-ext-diff", "--no-textconv"),
    ),
    "blame": Subcommand(
        Program(
            flags=(
                *no_value("l", "t", "s", "e show-email", "w", "n show-number", "f show-name", "p porcelain"),
                *no_value("-line-porcelain", "-root", "-show-stats", "c", "-first-parent", "-color-lines"),
                *no_value("-color-by-age"),
                Flag("L", (), Value("START,END", matches(r"[0-9]{1,9}(?:,[-+]?[0-9]{0,9})?|,[-+]?[0-9]{1,9}"))),
                Flag("", ("abbrev",), COUNT),
                Flag("", ("date",), DATE_FORMAT),
                Flag("", ("ignore-rev",), REV),
            ),
            operands_help="the operands are [REV] FILE, or [REV] -- FILE",
        ),
        "blame",
        forced=("--no-textconv",),
    ),
    "ls-files": Subcommand(
        Program(
            flags=(
                *no_value("c cached", "d deleted", "m modified", "o others", "i ignored", "s stage", "u unmerged"),
                *no_value("k killed", "-directory", "-no-empty-directory", "-eol", "z", "t", "v", "f", "-full-name"),
                *no_value("-error-unmatch", "-exclude-standard", "-deduplicate"),
                Flag("x", ("exclude",), PATTERN),
                Flag("", ("abbrev",), COUNT, optional=True),
            ),
        ),
        "paths",
    ),
    "rev-parse": Subcommand(
        Program(
            flags=(
                *no_value("-verify", "q quiet", "-symbolic", "-symbolic-full-name", "-show-toplevel", "-show-prefix"),
                *no_value("-show-cdup", "-git-dir", "-absolute-git-dir", "-git-common-dir", "-is-inside-work-tree"),
                *no_value("-is-inside-git-dir", "-is-bare-repository", "-is-shallow-repository", "-all"),
                *no_value("-revs-only", "-no-revs"),
                Flag("", ("abbrev-ref",), enum("strict", "loose"), optional=True),
                Flag("", ("short",), COUNT, optional=True),
            ),
            operands_help="other arguments are revisions",
        ),
        "revisions",
    ),
    "branch": Subcommand(
        Program(
            flags=(
                *no_value("a all", "r remotes", "v verbose", "i ignore-case", "-no-color", "-no-abbrev", "l list"),
                *no_value("-show-current"),
                Flag("", ("contains",), REV, optional=True),
                Flag("", ("no-contains",), REV, optional=True),
                Flag("", ("merged",), REV, optional=True),
                Flag("", ("no-merged",), REV, optional=True),
                Flag("", ("points-at",), REV),
                Flag("", ("sort",), Value("KEY", matches(r"-?[a-z][a-z:()-]{0,40}"))),
                Flag("", ("color",), WHEN, optional=True),
                Flag("", ("abbrev",), COLS),
            ),
            operands_help="other arguments are branch name patterns",
        ),
        "patterns",
        forced=("--list",),
    ),
}
# Global options before the subcommand: -C moves the cwd (inside its mount); the others are in force anyway.
GLOBAL_FLAGS = ("-C DIR", "--no-pager", "-P", "--no-optional-locks")
