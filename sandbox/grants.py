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

* the toolchain managers' installs under the person's home (sandbox/toolchains.py: pyenv, nvm, rustup, Go, ...),
  each checked as a real install, granted read and execute, never write.

A deny-list of credential places (`DENIED`: ~/.ssh, ~/.aws, keyrings, shell histories, ...) always wins: Landlock
cannot carve a subpath out of a granted directory, so nothing that is or contains one is ever granted (a detected
install is skipped, a configured path refused), and the bubblewrap view hides one that a mount still covers.

The result is a plain list of `ToolchainGrant`s, which every confinement layer is built from, and the shell's
PATH as the project expects it: the workspace venv's `bin/` and `node_modules/.bin` first, shims replaced by the
real bin/ they select, the server's own virtualenv never on it.
"""

from __future__ import annotations

import configparser
import glob
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from managed_tools.errors import StoreError
from managed_tools.sandbox.paths import inside
from managed_tools.sandbox.toolchains import Shims, detect

GrantAccess = Literal["run", "write"]  # run: read and execute; write: read, execute and write (as sandbox/policy.py)
VENV_DIRS = (".venv", "venv", "env")
MAX_CHILDREN = 256  # subdirectories of the workspace looked into for a virtualenv: start-up stays cheap
MAX_CFG_BYTES = 16 * 1024
SYSTEM_PREFIXES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # already granted to every domain
READ_KEY, WRITE_KEY = "sandbox.readPaths", "sandbox.writePaths"
# Credentials and private traces under the home that no grant may reach, whatever covers them.
DENIED = (".ssh", ".aws", ".config/gcloud", ".azure", ".kube", ".docker/config.json", ".netrc", ".gnupg", ".npmrc",
          ".pypirc", ".local/share/keyrings", ".mozilla", ".config/google-chrome", ".config/chromium",
          ".bash_history", ".zsh_history", ".python_history", ".node_repl_history", ".psql_history", ".mysql_history",
          ".sqlite_history", ".lesshst", ".local/share/fish/fish_history", ".cargo/credentials",
          ".cargo/credentials.toml", ".git-credentials", ".config/git/credentials", ".config/gh", ".pgpass",
          ".vault-token", ".password-store", ".terraform.d/credentials.tfrc.json", ".gem/credentials")  # fmt: skip


def config_line(path: str) -> str:
    """The config.json line that grants `path` read and execute (as a 126/127 note gives it)."""
    return json.dumps({"sandbox": {READ_KEY.removeprefix("sandbox."): [path]}})


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
    protected: tuple[Path, ...] = ()  # real paths never granted (the data dirs, the vault keys, the vaults, DENIED)
    front: tuple[Path, ...] = ()  # first on PATH: the workspace venv's bin/, node_modules/.bin
    env: tuple[tuple[str, str], ...] = ()  # VIRTUAL_ENV, as an activated venv sets it
    shims: tuple[Shims, ...] = ()  # shims dirs and the real bins that stand for them on PATH
    shared: tuple[tuple[str, Path], ...] = ()  # the person's caches a private one reads through (toolchains.Found)
    denied: tuple[Path, ...] = ()  # the deny-list's real paths, hidden in the view where a mount covers one

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


def denied(home: Path) -> dict[str, Path]:
    """The deny-list under `home`, named as a person writes it (`~/.ssh`)."""
    return {f"~/{where} (credentials or private traces)": home / where for where in DENIED}


def _refusal(path: Path, protected: Mapping[str, Path]) -> str | None:
    """Why `path` is never granted: it overlaps a protected or denied place, or holds the whole home."""
    why = _overlap(path, protected)
    if why is None and inside(os.path.realpath(Path.home()), path):
        why = "it contains the user's home directory"
    return why


def _needs_no_grant(path: Path, workspace: Path) -> bool:
    return any(inside(path, system) for system in SYSTEM_PREFIXES) or inside(path, workspace)


def venv_interpreters(workspace: Path, protected: Mapping[str, Path]) -> Grants:
    """Read and execute on the install prefix of each interpreter a workspace virtualenv points to; the first
    venv of the workspace root whose interpreter runs goes first on PATH, with VIRTUAL_ENV set."""
    grants: dict[Path, ToolchainGrant] = {}
    notices: list[str] = []
    active: Path | None = None
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
        if not _needs_no_grant(prefix, workspace):
            if (why := _refusal(prefix, protected)) is not None:
                notices.append(f"toolchain: not granting {prefix} ({shown}): {why}")
                continue
            grants.setdefault(prefix, ToolchainGrant(prefix, "run", f"interpreter of {shown}"))
        if active is None and cfg_path.parent.parent == workspace:
            active = cfg_path.parent
    front = () if active is None else (active / "bin",)
    env = () if active is None else (("VIRTUAL_ENV", str(active)),)
    return Grants(tuple(grants.values()), tuple(notices), front=front, env=env)


def detected(workspace: Path, protected: Mapping[str, Path], server_path: str) -> Grants:
    """The toolchain managers' installs (sandbox/toolchains.py) that overlap nothing protected or denied, read
    and execute; their shims dirs with only the bins so granted."""
    home = Path(os.path.realpath(Path.home()))
    found = detect(home, os.environ, workspace, server_path, own=own_venv())
    grants: list[ToolchainGrant] = []
    notices: list[str] = []
    for path, manager in found.installs:
        if _needs_no_grant(path, workspace):
            continue
        if (why := _refusal(path, protected)) is not None:
            notices.append(f"toolchain: not granting {path} ({manager}): {why}")
            continue
        grants.append(ToolchainGrant(path, "run", f"detected {manager}"))
    granted = Grants(tuple(grants))
    shims = tuple(
        Shims(s.dir, tuple(b for b in s.bins if granted.covering(b) is not None), s.manager, s.keep)
        for s in found.shims
    )
    shared = tuple((role, path) for role, path in found.shared if granted.covering(path) is not None)
    return Grants(granted.grants, tuple(notices), shims=shims, shared=shared)


def own_venv() -> Path | None:
    """The server's own virtualenv (real path), which is never handed to a spawned program."""
    return Path(os.path.realpath(sys.prefix)) if sys.prefix != sys.base_prefix else None


def shell_path(server_path: str, grants: Grants, mounts: Iterable[Path], *, fallback: str) -> str:
    """The writable shell's PATH: `grants.front` (the workspace's venv and node_modules/.bin, as an activated
    venv and npm put them), then the server's own entries that the shell may run from (a system directory or a
    grant, by its real path: the view binds grants there), a shims dir replaced by the bins it selects, in their
    order, then `fallback`'s. Relative entries, other entries inside a mount and the server's own virtualenv are
    left out: a command name must not depend on the cwd, on other files a cloned repository ships, or run us."""
    roots = [os.path.realpath(m) for m in mounts]
    own = own_venv()
    kept: list[str] = [str(p) for p in grants.front]
    for entry in [*server_path.split(os.pathsep), *fallback.split(os.pathsep)]:
        if not os.path.isabs(entry):
            continue
        real = os.path.realpath(entry)
        shims = next((s for s in grants.shims if str(s.dir) == real), None)
        if shims is not None:
            kept += [str(b) for b in shims.bins if str(b) not in kept]
            if not shims.keep:
                continue
        if any(inside(real, root) for root in roots) or not os.path.isdir(real):
            continue
        if own is not None and inside(real, own):
            continue
        if any(inside(real, system) for system in SYSTEM_PREFIXES):
            chosen = entry
        elif grants.covering(real) is not None:
            chosen = real
        else:
            continue
        if chosen not in kept:
            kept.append(chosen)
    return os.pathsep.join(kept)


def node_bin(workspace: Path) -> tuple[Path, ...]:
    """`node_modules/.bin` of a Node project at the workspace root (there or not yet: `npm install` makes it)."""
    return (workspace / "node_modules" / ".bin",) if (workspace / "package.json").is_file() else ()


def toolchain_grants(
    workspace: Path,
    *,
    read_paths: Sequence[Path] = (),
    write_paths: Sequence[Path] = (),
    protected: Mapping[str, Path],
    server_path: str = "",
) -> Grants:
    """Everything the writable shell gets beyond its mounts: configured paths first, then venv interpreters, then
    the detected toolchains. Raises GrantError for a configured path that overlaps a protected or denied one."""
    workspace = Path(os.path.realpath(workspace))
    deny = denied(Path(os.path.realpath(Path.home())))
    refused = {**protected, **deny}
    venvs = venv_interpreters(workspace, refused)
    found = detected(workspace, refused, server_path)
    never = tuple(Path(os.path.realpath(where)) for where in refused.values())
    everything = (*configured(read_paths, write_paths, refused), *venvs.grants, *found.grants)
    return Grants(
        everything, (*venvs.notices, *found.notices), never, (*venvs.front, *node_bin(workspace)), venvs.env,
        found.shims, found.shared, tuple(Path(os.path.realpath(p)) for p in deny.values()),
    )  # fmt: skip
