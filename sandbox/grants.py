"""The project's toolchain, granted to the writable shell narrowly: what it may read and run (or write) beyond
the mounts and the system directories.

Two sources, both read by the server, never by a confined program:

* the interpreters the workspace's virtualenvs point to: `pyvenv.cfg` in `<workspace>/{.venv,venv,env}` and one
  level of subdirectories down; its `home` resolved through symlinks to the real interpreter, whose install
  prefix (the parent of its `bin/`) is granted read and execute, never write. The workspace is attacker-controlled
  input (a cloned repository), so the file only *selects* among real Python installs: the prefix must hold that
  interpreter and its standard library (`lib/python3.*/os.py`), may neither lie inside nor contain a protected
  path (the data dirs, the vault keys, the vaults), nor contain the user's home. A `pyvenv.cfg` that fails is
  skipped with a notice.
* the person's configuration, `sandbox.readPaths` (read and execute) and `sandbox.writePaths` (read, execute and
  write): for nvm, pyenv, caches. A configured path that overlaps a protected one is refused at start-up.

The result is a plain list of `ToolchainGrant`s, which every confinement layer is built from.
"""

from __future__ import annotations

import configparser
import glob
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from managed_tools.sandbox.paths import inside
from managed_tools.stores.errors import StoreError

GrantAccess = Literal["run", "write"]  # run: read and execute; write: read, execute and write (as sandbox/policy.py)
VENV_DIRS = (".venv", "venv", "env")
MAX_CHILDREN = 256  # subdirectories of the workspace looked into for a virtualenv: start-up stays cheap
MAX_CFG_BYTES = 16 * 1024
SYSTEM_PREFIXES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # already granted to every domain
READ_KEY, WRITE_KEY = "sandbox.readPaths", "sandbox.writePaths"


class GrantError(StoreError):
    """A configured grant the server refuses to give; the message names the path, the key and why."""


@dataclass(frozen=True)
class ToolchainGrant:
    """`access` beneath the real path `path`; `source` says where it came from (a config key, a pyvenv.cfg)."""

    path: Path
    access: GrantAccess
    source: str


@dataclass(frozen=True)
class Grants:
    """What a shell domain gets beyond its mounts, and the notices about what was skipped."""

    grants: tuple[ToolchainGrant, ...] = ()
    notices: tuple[str, ...] = ()
    protected: tuple[Path, ...] = ()  # real paths never granted (the data dirs, the vault keys, the vaults)

    def covering(self, path: str | os.PathLike[str]) -> ToolchainGrant | None:
        """The grant a real `path` lies under, if any."""
        return next((g for g in self.grants if inside(path, g.path)), None)

    def protects(self, path: str | os.PathLike[str]) -> bool:
        """Whether a real `path` lies where nothing is ever granted (so no message suggests granting it)."""
        return any(inside(path, where) for where in self.protected)


NO_GRANTS = Grants()


def _overlap(path: Path, protected: Mapping[str, Path]) -> str | None:
    """What protected location `path` lies inside or contains (Landlock cannot carve a subdirectory out of a grant)."""
    for what, where in protected.items():
        real = Path(os.path.realpath(where))
        if inside(path, real):
            return f"it lies inside {what} ({real})"
        if inside(real, path):
            return f"it contains {what} ({real})"
    return None


def configured(
    read_paths: Iterable[Path], write_paths: Iterable[Path], protected: Mapping[str, Path]
) -> list[ToolchainGrant]:
    """The person's grants, resolved (a missing path is kept out: a rule cannot grant what is not there)."""
    grants: list[ToolchainGrant] = []
    for key, access, paths in ((READ_KEY, "run", read_paths), (WRITE_KEY, "write", write_paths)):
        for given in paths:
            expanded = given.expanduser()
            if not expanded.is_absolute():
                raise GrantError(f"config {key}: {given} is not an absolute path; give the full path.")
            real = Path(os.path.realpath(expanded))
            if (why := _overlap(real, protected)) is not None:
                raise GrantError(
                    f"config {key}: {given} is refused: {why}, which no spawned program may reach. Grant a "
                    "narrower directory (the tool's own install or cache dir)."
                )
            if real.exists():
                grants.append(ToolchainGrant(real, "write" if access == "write" else "run", f"config {key}"))
    return grants


def _venv_configs(workspace: Path) -> list[Path]:
    """`pyvenv.cfg` of the workspace's own virtualenvs and those one directory down, in a stable order."""
    found = [workspace / name / "pyvenv.cfg" for name in VENV_DIRS]
    try:
        children = sorted(e.name for e in os.scandir(workspace) if e.is_dir(follow_symlinks=False))
    except OSError:
        children = []
    for child in children[:MAX_CHILDREN]:
        found += [workspace / child / name / "pyvenv.cfg" for name in VENV_DIRS]
    return [path for path in found if path.is_file()]


def _read_cfg(path: Path) -> dict[str, str]:
    with open(path, "rb") as handle:
        raw = handle.read(MAX_CFG_BYTES + 1)
    if len(raw) > MAX_CFG_BYTES:
        raise ValueError("too large for a pyvenv.cfg")
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string("[venv]\n" + raw.decode("utf-8"))
    return {key.strip(): value.strip() for key, value in parser["venv"].items()}


def _interpreter(home: Path, cfg: Mapping[str, str]) -> Path | None:
    """The real interpreter in `home` (the base install's bin dir) that the venv's python runs."""
    version = cfg.get("version_info") or cfg.get("version") or ""
    short = ".".join(version.split(".")[:2])
    for name in (f"python{short}" if short else "", "python3", "python"):
        if name and (home / name).is_file():
            return Path(os.path.realpath(home / name))
    return None


def _prefix(interpreter: Path) -> Path | None:
    """The install prefix of a real interpreter: the parent of its bin/, when its standard library is there."""
    if interpreter.parent.name != "bin":
        return None
    prefix = interpreter.parent.parent
    landmarks = glob.glob(glob.escape(str(prefix)) + "/lib/python3*/os.py")
    return prefix if landmarks else None


def venv_interpreters(workspace: Path, protected: Mapping[str, Path]) -> Grants:
    """Read and execute on the install prefix of each interpreter a workspace virtualenv points to."""
    grants: dict[Path, ToolchainGrant] = {}
    notices: list[str] = []
    for cfg_path in _venv_configs(workspace):
        shown = os.path.relpath(cfg_path, workspace)
        try:
            cfg = _read_cfg(cfg_path)
        except (OSError, ValueError, configparser.Error) as exc:
            notices.append(f"toolchain: skipped {shown}: {exc}")
            continue
        home = cfg.get("home", "")
        if not home or not os.path.isabs(home):
            notices.append(f"toolchain: skipped {shown}: no absolute `home`")
            continue
        interpreter = _interpreter(Path(os.path.realpath(home)), cfg)
        prefix = None if interpreter is None else _prefix(interpreter)
        if interpreter is None or prefix is None:
            notices.append(f"toolchain: skipped {shown}: {home} holds no Python install (bin/python, lib/python3*)")
            continue
        if any(inside(prefix, system) for system in SYSTEM_PREFIXES) or inside(prefix, workspace):
            continue  # already readable by the shell
        why = _overlap(prefix, protected)
        if why is None and inside(os.path.realpath(Path.home()), prefix):
            why = "it contains the user's home directory"
        if why is not None:
            notices.append(f"toolchain: not granting {prefix} ({shown}): {why}")
            continue
        grants.setdefault(prefix, ToolchainGrant(prefix, "run", f"interpreter of {shown}"))
    return Grants(tuple(grants.values()), tuple(notices))


def shell_path(server_path: str, grants: Grants, mounts: Iterable[Path], *, fallback: str) -> str:
    """The writable shell's PATH: the server's own entries that the shell may run from (a system directory or a
    grant), in their order, then `fallback`'s. Relative entries and entries inside a mount are left out: what a
    command name runs must not depend on the cwd or on files a cloned repository ships."""
    roots = [os.path.realpath(m) for m in mounts]
    kept: list[str] = []
    for entry in [*server_path.split(os.pathsep), *fallback.split(os.pathsep)]:
        if not os.path.isabs(entry) or entry in kept:
            continue
        real = os.path.realpath(entry)
        if any(inside(real, root) for root in roots) or not os.path.isdir(real):
            continue
        if any(inside(real, system) for system in SYSTEM_PREFIXES) or grants.covering(real) is not None:
            kept.append(entry)
    return os.pathsep.join(kept)


def toolchain_grants(
    workspace: Path,
    *,
    read_paths: Sequence[Path] = (),
    write_paths: Sequence[Path] = (),
    protected: Mapping[str, Path],
) -> Grants:
    """Everything the writable shell gets beyond its mounts: configured paths first, then venv interpreters.
    Raises GrantError for a configured path that overlaps a protected one."""
    found = venv_interpreters(workspace, protected)
    never = tuple(Path(os.path.realpath(where)) for where in protected.values())
    return Grants((*configured(read_paths, write_paths, protected), *found.grants), found.notices, never)
