"""Finding the repository `bash git` reads, and the environment git runs in (tools/shell/git.py checks the argv).

A cloned repository is attacker-controlled, and git runs programs its config names: a pager, an fsmonitor hook,
an external diff, textconv and filter drivers, gpg, credential helpers, ssh. The kernel is the boundary (the
read-only domain executes only system binaries, writes nowhere, opens no TCP); this is the second layer:

* the repository must lie inside the mount: a `.git` file or link pointing elsewhere is refused before git runs,
  then git itself is asked (`rev-parse`) where its git dir, common dir and work tree are, and each is checked, as
  are its alternate object stores and the links among its entries;
* a fixed environment: no system or global config, no pager, optional locks off (status never writes the index),
  no network protocol, and a `GIT_CONFIG_COUNT` override for every program-valued key, both the fixed ones and
  the drivers the repository's config defines (listed first with `git config --list`);
* config included from outside the mount, or a file-valued key (blame's ignore list, the mailmap) naming a file
  there, is refused: git would read it, and print parts of it in its errors.
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
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.shell.argv import FIXED_ENV
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


async def find(binary: str, guard: PathGuard, where: Resolved, domain: Domain | None) -> Repository:
    """The repository git would use from `where`, each of its places checked inside the mount, and the overrides
    its config needs; a refusal otherwise. Nothing of it runs but git itself, confined, twice (three times the
    first time: its version)."""
    _check_gitfile(guard, where)
    await _check_version(binary, guard, where, domain)
    return await _probe(binary, guard, where, domain)


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


def environment(where: Resolved, repo: Repository) -> dict[str, str]:
    """The whole environment of the command: fixed, and bound to exactly the repository that was checked."""
    env = {**GIT_ENV, **_ceiling(where), "GIT_DIR": repo.git_dir, "GIT_WORK_TREE": repo.work_tree}
    return env | config_env(repo.config)


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
    child = await spawn([binary, *args], domain=domain, env=env, cwd=where.host,
                        stdin=asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe, new_session=True)  # fmt: skip
    process = child.process
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
        child.end()  # what it started goes with it
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
