"""`bash git`: the read-only git commands a coding agent runs most, in the read-only hand's domain.

A cloned repository is attacker-controlled, and git runs programs its config names: a pager, an fsmonitor hook,
an external diff, textconv and filter drivers, gpg, credential helpers, ssh. The kernel is the boundary (the
read-only domain executes only system binaries, writes nowhere, opens no TCP); this module is the second layer,
in four parts:

1. an allowlist: the subcommands and flags of tools/shell/git_flags.py, parsed like every `bash` program;
2. the repository must lie inside the mount: a `.git` file pointing elsewhere is refused before git runs, then
   git itself is asked (`rev-parse`) where its git dir, common dir and work tree are, and each is checked;
3. a fixed environment: no system or global config, no pager, optional locks off (status never writes the index),
   no network protocol, and a `GIT_CONFIG_COUNT` override for every program-valued key, both the fixed ones and
   the drivers the repository's config defines (listed first with `git config --list`);
4. flags every run gets: `--no-ext-diff` and `--no-textconv` where git diffs, `--ignore-submodules=all` (each
   submodule has a config of its own), `branch --list` (a bare `branch NAME` creates one).

A config file included from outside the mount, or a file-valued key (blame's ignore list, the mailmap) naming one,
is refused: git would read it, and print parts of it in its errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio

from managed_tools.sandbox import files
from managed_tools.sandbox.fsaccess import FileAccessError, kind_name
from managed_tools.sandbox.paths import PathError, PathGuard, Resolved, inside
from managed_tools.sandbox.spawn import Domain, spawn
from managed_tools.tools.framework.errors import ToolError
from managed_tools.tools.shell.argv import (
    FIXED_ENV,
    Parser,
    Plan,
    canonical,
    check_args,
    checked_path,
    resolve_binary,
    working_dir,
)
from managed_tools.tools.shell.flags import Flag
from managed_tools.tools.shell.git_flags import GLOBAL_FLAGS, REVISION, SUBCOMMANDS
from managed_tools.tools.shell.posture import virtualize

GIT_ENV = {
    **FIXED_ENV,
    "HOME": "/nonexistent",  # no ~/.gitconfig, ~/.config/git/attributes or ignore file of anyone's
    "XDG_CONFIG_HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_OPTIONAL_LOCKS": "0",  # status and diff refresh the index in memory only: the domain cannot write
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ALLOW_PROTOCOL": "none",  # a partial clone's lazy fetch, or any transport, is refused whatever config says
}
# Command-line scope: it wins over the repository's own config. An empty value means "none" for these keys.
FIXED_CONFIG = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.pager", "cat"),
    ("core.editor", ":"),  # git's own "no editor"
    ("sequence.editor", ":"),
    ("core.sshCommand", ""),
    ("core.gitProxy", ""),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("gpg.program", ""),
    ("log.showSignature", "false"),
    ("format.pretty", "medium"),  # a repository's default format could hold %G (gpg)
    ("column.ui", "never"),  # columns are made by a `git column` child
    ("status.submoduleSummary", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("submodule.recurse", "false"),
    ("protocol.allow", "never"),
    ("safe.bareRepository", "explicit"),  # a bare repository planted in a tree is never discovered
)
# Program-valued keys with a name of the repository's choosing: each one found is overridden.
DRIVER_KEYS = (
    (re.compile(r"filter\..+\.(?:clean|smudge|process)", re.DOTALL), ""),
    (re.compile(r"filter\..+\.required", re.DOTALL), "false"),  # an emptied required filter would fail the command
    (re.compile(r"pager\..+", re.DOTALL), "false"),
    (re.compile(r"credential\..+\.helper", re.DOTALL), ""),
    (re.compile(r"gpg\..+\.program", re.DOTALL), ""),
)  # diff.<driver>.textconv and .command: --no-textconv and --no-ext-diff, as an empty one would be run as ""
FILE_KEYS = frozenset({"blame.ignorerevsfile", "mailmap.file", "core.attributesfile", "core.excludesfile",
                       "diff.orderfile"})  # fmt: skip
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_ENTRIES = 4000
PROBE_SECONDS = 10.0
GITFILE_BYTES = 4096
LAUNCH_FAILED = 126  # the launcher's status when it could not confine or start git
PROBE_ERROR_BYTES = 4096
MIN_VERSION = (2, 31)  # GIT_CONFIG_COUNT
_VERSIONS: dict[str, tuple[int, int]] = {}
ALTERNATE_DEPTH = 5  # git's own limit on alternates of alternates
QUOTED_PATH = re.compile(r"'(/[^']*)'")


@dataclass(frozen=True)
class Repository:
    git_dir: str
    work_tree: str
    config: tuple[tuple[str, str], ...]  # FIXED_CONFIG and the overrides this repository's drivers need


def allowed(args: list[str]) -> bool:
    """Whether `git ARGS` would pass the flag check (paths and the repository are checked only when it runs)."""
    try:
        _, name, rest = _globals(args)
        _flags(name, rest)
    except ToolError:
        return False
    return True


async def plan(guard: PathGuard, domain: Domain | None, args: list[str], cwd: str) -> Plan:
    binary = resolve_binary("git")
    where, argv = checked(guard, args, cwd)
    _check_gitfile(guard, where)
    await _check_version(binary, guard, where, domain)
    repo = await _probe(binary, guard, where, domain)
    env = {**GIT_ENV, **_ceiling(where), "GIT_DIR": repo.git_dir, "GIT_WORK_TREE": repo.work_tree}
    return Plan(binary=binary, argv=[binary, *argv], cwd=where, env=env | config_env(repo.config))


async def _check_version(binary: str, guard: PathGuard, where: Resolved, domain: Domain | None) -> None:
    """An older git than MIN_VERSION would ignore GIT_CONFIG_COUNT, and with it every override: refused. Asked
    once per binary."""
    if binary not in _VERSIONS:
        out = await _git(binary, guard, where, domain, dict(FIXED_ENV), "version")
        found = re.search(rb"(\d+)\.(\d+)", out)
        _VERSIONS[binary] = (int(found[1]), int(found[2])) if found else (0, 0)
    if _VERSIONS[binary] < MIN_VERSION:
        major, minor = _VERSIONS[binary]
        raise ToolError(
            f"git {major}.{minor} is older than {MIN_VERSION[0]}.{MIN_VERSION[1]}, which the read-only hand needs to "
            "disable the programs a repository's config names; use shell_run (it asks a person first)."
        )


def checked(guard: PathGuard, args: list[str], cwd: str) -> tuple[Resolved, list[str]]:
    """The directory git runs in, and its argv after the binary: `--no-pager SUB forced flags revisions -- paths`,
    each piece checked; the repository itself is not looked at yet."""
    check_args(args)
    directory, name, rest = _globals(args)
    where = working_dir(guard, cwd)
    if directory is not None:
        where = working_dir(guard, posixpath.normpath(posixpath.join(where.virtual, directory)), label="git -C")
    sub = SUBCOMMANDS[name]
    flags, operands, before = _flags(name, rest)
    revisions, paths = _operands(guard, where, name, operands, before)
    given = [canonical(flag, value) for flag, value in flags]
    forced = list(sub.forced)
    if name == "branch" and "--show-current" in given:
        if operands:
            raise ToolError("git branch --show-current takes no patterns.")
        forced = []  # --show-current is its own mode: with --list git refuses both
    argv = ["--no-pager", name, *forced, *given, *revisions]
    if sub.operands != "revisions":
        argv += ["--", *paths]  # rev-parse would print a `--`; its operands are revisions only
    return where, argv


def _globals(args: list[str]) -> tuple[str | None, str, list[str]]:
    """git's own options before the subcommand, the subcommand, and what follows it."""
    directory = None
    index = 0
    while index < len(args) and args[index].startswith("-"):
        arg = args[index]
        if arg == "-C" and index + 1 < len(args):
            directory = args[index + 1]
            index += 2
        elif arg in ("--no-pager", "-P", "--no-optional-locks"):
            index += 1  # in force on every run anyway
        else:
            raise ToolError(
                f"git: {arg[:60]!r} is not an allowed option before the subcommand; these are: "
                f"{', '.join(GLOBAL_FLAGS)}. No -c, --git-dir, --work-tree or --exec-path: git's config and "
                "repository are fixed."
            )
    name = args[index] if index < len(args) else ""
    if name not in SUBCOMMANDS:
        shown = repr(name[:40]) if name else "no subcommand"
        raise ToolError(
            f"git: {shown} is not one of the read-only subcommands bash runs: {', '.join(SUBCOMMANDS)} (branch "
            "lists only). Use shell_run for anything else (it asks a person first)."
        )
    return directory, name, args[index + 1 :]


def _flags(name: str, rest: list[str]) -> tuple[list[tuple[Flag, str | None]], list[str], int | None]:
    parser = Parser(f"git {name}", SUBCOMMANDS[name].program, rest)
    flags, operands = parser.parse()
    return flags, operands, parser.before_dashes


def _operands(
    guard: PathGuard, where: Resolved, name: str, operands: list[str], before: int | None
) -> tuple[list[str], list[str]]:
    """(revisions, host paths) in the order git is given them."""
    sub = SUBCOMMANDS[name]
    if sub.operands == "paths":
        return [], [_pathspec(guard, where, op) for op in operands]
    if sub.operands == "patterns":
        return [], operands  # branch name patterns; git matches them against refs, never files
    if sub.operands == "revisions":
        if before is not None:
            raise ToolError(f"git {name} takes revisions only, no paths after --.")
        return [_revision(name, op) for op in operands], []
    if sub.operands == "blame":
        if before is None:
            before = len(operands) - 1
        if not operands or before > 1 or len(operands) - before != 1:
            raise ToolError("git blame takes [REV] FILE, or [REV] -- FILE: at most one revision and one file.")
        return [_revision(name, op) for op in operands[:before]], [_pathspec(guard, where, operands[-1])]
    if before is None:  # like git: an operand that names an existing file is a path, anything else a revision
        paths = [op for op in operands if _existing(guard, where, op)]
        return [_revision(name, op) for op in operands if op not in paths], [
            _pathspec(guard, where, op) for op in paths
        ]
    return [_revision(name, op) for op in operands[:before]], [_pathspec(guard, where, op) for op in operands[before:]]


def _revision(name: str, operand: str) -> str:
    if REVISION.fullmatch(operand) is None:
        raise ToolError(
            f"git {name}: {operand[:60]!r} is not a revision this hand takes (none starts with -, / or ., none "
            "holds a control character); put paths after --."
        )
    return operand


def _existing(guard: PathGuard, where: Resolved, operand: str) -> bool:
    try:
        return checked_path(guard, where, operand, "list").exists
    except ToolError:
        return False


def _pathspec(guard: PathGuard, where: Resolved, operand: str) -> str:
    """A path for git, checked by the guard inside the cwd's mount and given as the host path it spells (not the
    target of a link: git tracks a link as itself). Pathspec magic (`:(top)`, `:!x`) is not taken."""
    if operand.startswith(":"):
        raise ToolError(f"{operand[:60]!r}: pathspec magic is not taken; give a plain path or a glob.")
    resolved = checked_path(guard, where, operand, "list")
    return os.path.join(resolved.root, resolved.relative) if resolved.relative else resolved.root


def _ceiling(where: Resolved) -> dict[str, str]:
    """Git looks for a repository from the cwd up to the mount root, never above it."""
    parent = os.path.dirname(where.root)
    return {"GIT_CEILING_DIRECTORIES": parent} if parent != where.root else {}


def _check_gitfile(guard: PathGuard, where: Resolved) -> None:
    """The first `.git` from the cwd up to the mount root (the one git would use) must keep the repository inside
    the mount: a link or a `gitdir:` file pointing elsewhere is refused before git reads anything there."""
    virtual = where.virtual
    while True:
        try:
            dotgit = guard.resolve(posixpath.join(virtual, ".git"), "list")
        except PathError as exc:
            raise ToolError(f"git: {exc}") from None
        if dotgit.exists:
            break
        if virtual == where.mount.mount_path:
            return
        virtual = posixpath.dirname(virtual)
    if dotgit.host.is_dir():
        _check_entries(dotgit.host, dotgit.virtual)
        return
    try:
        text, _ = files.read_limited(dotgit, GITFILE_BYTES)
    except FileAccessError as exc:
        raise ToolError(f"git: {exc}") from None
    target = text.decode(errors="replace").partition("\n")[0].removeprefix("gitdir:").strip()
    real = os.path.realpath(os.path.join(dotgit.host.parent, target))
    if not inside(real, where.root) or any(inside(real, p) for p in guard.private):
        raise ToolError(f"git: {dotgit.virtual} points to a git directory outside {where.mount.mount_path}; refused.")
    _check_entries(Path(real), target)


def _check_entries(git_dir: Path, shown: str) -> None:
    """No FIFO, socket or device among the git dir's entries (HEAD, config, index, ...): git would wait on one."""
    with contextlib.suppress(OSError), os.scandir(git_dir) as entries:
        for entry in entries:
            mode = entry.stat(follow_symlinks=False).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise ToolError(f"git: {shown}/{entry.name} is {kind_name(mode)}; git would wait on it. Refused.")


async def _probe(binary: str, guard: PathGuard, where: Resolved, domain: Domain | None) -> Repository:
    """Where git finds the repository from the cwd, checked inside the mount, and the overrides its config needs."""
    env = {**GIT_ENV, **_ceiling(where), **config_env(FIXED_CONFIG)}
    found, listed = await asyncio.gather(  # side by side: neither needs the other's answer to run
        _git(binary, guard, where, domain, env, "rev-parse", "--absolute-git-dir", "--git-common-dir",
             "--show-toplevel"),
        _git(binary, guard, where, domain, env, "config", "--list", "--show-origin", "-z"),
        return_exceptions=True,
    )  # fmt: skip
    for answer in (found, listed):
        if isinstance(answer, BaseException):
            raise answer  # rev-parse's first: "not a git repository" says more than config's failure
    assert isinstance(found, bytes) and isinstance(listed, bytes)
    git_dir, top = _located(found, guard, where)
    return Repository(git_dir, top, FIXED_CONFIG + _overrides(listed, str(where.host), top, where))


def _located(out: bytes, guard: PathGuard, where: Resolved) -> tuple[str, str]:
    """(git dir, work tree) from rev-parse's answer, once each of the three places is checked inside the mount."""
    lines = out.decode(errors="surrogateescape").splitlines()
    if len(lines) != 3:
        raise ToolError(f"git: {where.virtual} is not inside a work tree of a repository.")
    git_dir, common, top = (os.path.realpath(os.path.join(where.host, line)) for line in lines)
    for label, path in (("git directory", git_dir), ("common git directory", common), ("work tree", top)):
        if not inside(path, where.root) or any(inside(path, p) for p in guard.private):
            raise ToolError(f"git: the repository's {label} lies outside {where.mount.mount_path}; refused.")
    _check_objects(guard, where, git_dir, common)
    return git_dir, top


def _check_objects(guard: PathGuard, where: Resolved, git_dir: str, common: str) -> None:
    """Objects and refs read from outside the mount are refused: an alternate object store there (and the
    alternates it names in turn, as deep as git follows them), or a link among the git dir's own entries."""
    outside = f"git: the repository reads {{}} outside {where.mount.mount_path}; refused."
    objects = os.path.join(common, "objects")
    for directory in (git_dir, common, objects, os.path.join(objects, "pack"), os.path.join(objects, "info")):
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_symlink() and not inside(os.path.realpath(entry.path), where.root):
                    raise ToolError(outside.format(f"{os.path.relpath(entry.path, common)} (a link)"))
    stores, seen = [objects], set[str]()
    for _ in range(ALTERNATE_DEPTH):
        found = []
        for store in stores:
            for line in _alternates(guard, where, store):
                target = os.path.realpath(os.path.join(store, line))
                if not inside(target, where.root):
                    raise ToolError(outside.format("objects from an alternate object store"))
                if target not in seen:
                    seen.add(target)
                    found.append(target)
        stores = found


def _alternates(guard: PathGuard, where: Resolved, objects: str) -> list[str]:
    """The stores `objects/info/alternates` names (git's format: one path a line, # comments), read as `read`
    reads (a FIFO there is refused, not waited on)."""
    host = os.path.join(objects, "info", "alternates")
    if not os.path.lexists(host):
        return []
    try:
        resolved = guard.resolve(where.mount.mount_path + "/" + os.path.relpath(host, where.root), "read")
        data, _ = files.read_limited(resolved, MAX_CONFIG_BYTES)
    except (PathError, FileAccessError) as exc:
        raise ToolError(f"git: {exc}") from None
    text = data.decode(errors="surrogateescape")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _overrides(listed: bytes, host: str, top: str, where: Resolved) -> tuple[tuple[str, str], ...]:
    """The override each program-valued key of the repository's config needs; a refusal for config read from a
    file outside the mount, or a file-valued key naming one."""
    items = listed.decode(errors="surrogateescape").split("\0")
    if len(items) > 2 * MAX_CONFIG_ENTRIES:
        raise ToolError(f"git: this repository's config has more than {MAX_CONFIG_ENTRIES} entries; refused.")
    found: dict[str, str] = {}
    for origin, entry in zip(items[::2], items[1::2], strict=False):
        if origin == "command line:":
            continue  # ours
        source = origin.removeprefix("file:")
        if source == origin or not inside(os.path.realpath(os.path.join(host, source)), where.root):
            raise ToolError(
                f"git: this repository's config includes a file outside {where.mount.mount_path} (include.path or "
                "includeIf); refused."
            )
        key, _, value = entry.partition("\n")
        if key.lower() in FILE_KEYS and not _inside(value, top, where.root):
            raise ToolError(f"git: this repository's config sets {key} to a file outside {where.mount.mount_path}; "
                            "refused.")  # fmt: skip
        for pattern, override in DRIVER_KEYS:
            if pattern.fullmatch(key):
                found[key] = override
    return tuple(found.items())


def _inside(value: str, top: str, root: str) -> bool:
    if value.startswith(("~", "%(")):
        return False  # a home directory, or git's install prefix
    return inside(os.path.realpath(os.path.join(top, value)), root)


def config_env(config: Iterable[tuple[str, str]]) -> dict[str, str]:
    pairs = list(config)
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    return env


async def _git(
    binary: str, guard: PathGuard, where: Resolved, domain: Domain | None, env: dict[str, str], *args: str
) -> bytes:
    """Stdout of one probe, run confined like the command itself; git's own message, virtual, when it fails."""
    pipe = asyncio.subprocess.PIPE
    process = await spawn([binary, *args], domain=domain, env=env, cwd=where.host,
                          stdin=asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe, new_session=True)  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    try:
        with anyio.fail_after(PROBE_SECONDS):
            out, err = await asyncio.gather(_read(process.stdout), _read(process.stderr))
            await process.wait()
    except TimeoutError:
        raise ToolError(f"git took longer than {PROBE_SECONDS:.0f} s to find the repository; refused.") from None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode == LAUNCH_FAILED:
        raise ToolError("git could not be started confined; nothing ran.")
    if process.returncode != 0:
        lines = err[:PROBE_ERROR_BYTES].decode(errors="replace").strip().splitlines()
        fatal = [line for line in lines if line.startswith("fatal:")] or lines or [f"exit {process.returncode}"]
        reason = _scrub(guard, fatal[-1])
        raise ToolError(f"git: {reason} (looked from {where.virtual} up to {where.mount.mount_path})")
    if len(out) > MAX_CONFIG_BYTES:
        raise ToolError(f"git printed more than {MAX_CONFIG_BYTES} bytes while finding the repository; refused.")
    return out


def _scrub(guard: PathGuard, message: str) -> str:
    """Git's message with host paths shown virtual, and any path outside the mounts (an include it could not
    read, the parent it stopped at) not shown at all."""
    virtual = virtualize(guard, message)
    mounts = tuple(m.mount_path for m in guard.mounts)
    return QUOTED_PATH.sub(lambda m: m[0] if m[1].startswith(mounts) else "'(a path outside the mounts)'", virtual)


async def _read(stream: asyncio.StreamReader) -> bytes:
    """All of `stream`, keeping at most one byte more than the config limit (the rest is drained)."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        kept += chunk[: MAX_CONFIG_BYTES + 1 - len(kept)]
    return bytes(kept)
