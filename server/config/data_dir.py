"""Where a workspace's state lives: outside every mount, so nothing a tool runs can read the database.

The default is one directory per workspace under the user's state directory (platformdirs), named for the
workspace and keyed by a hash of its real path: the same workspace always maps to the same directory, two
workspaces never share one. The old default, `<workspace>/.managed-tools`, is never read: a workspace is input
that anyone may have written (a cloned repository), so what it holds cannot configure the server, grant a
permission or seed approvals and memory. A person who wants an old data dir back moves it with `managed-tools
adopt` (server/cli/adopt.py), which shows what it takes and asks.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

from platformdirs import user_config_dir, user_state_dir

APP_NAME = "managed-tools"
STATE_FILE = "state.db"  # the SQLite state in the data dir
BUSY_TIMEOUT_MS = 5_000  # how long a writer waits for another process's lock
LEGACY_DIR = ".managed-tools"  # the default data dir before it moved out of the workspace
NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def state_root() -> Path:
    """`<user state dir>/managed-tools/workspaces`, e.g. `~/.local/state/managed-tools/workspaces` on Linux."""
    return Path(user_state_dir(APP_NAME, appauthor=False)) / "workspaces"


def default_data_dir(workspace: Path) -> Path:
    """`<state root>/<readable name>-<16 hex of sha256(real workspace path)>`; `workspace` is already resolved."""
    digest = hashlib.sha256(os.fsencode(workspace)).hexdigest()[:16]
    name = NAME_CHARS.sub("-", workspace.name).strip("-.")[:40] or "root"
    return state_root() / f"{name}-{digest}"


class ConfigError(Exception):
    """The configuration is unusable; the message says which file or flag and why (and what to pass instead)."""


def user_config_home() -> Path:
    """`<user config dir>/managed-tools` (`~/.config/managed-tools` on Linux): the user-wide config.json, the user's
    skills and the vault key files. Never a workspace's: a tool can write a workspace."""
    return Path(user_config_dir(APP_NAME, appauthor=False))


def user_skills_dir() -> Path:
    return user_config_home() / "skills"


def vault_key_file(data_dir: Path) -> Path:
    """Where a data dir's vault key is kept when there is no OS keyring (its path names it)."""
    return user_config_home() / "vault-keys" / f"{hashlib.sha256(os.fsencode(data_dir)).hexdigest()[:32]}.key"


def skill_dirs(
    workspace: Path, substrate: Path, configured: tuple[Path, ...] | None, extra: tuple[Path, ...]
) -> list[tuple[str, Path, str, str]]:
    """The skill directories, earliest first (a later one wins by name), as (kind, root, below it, uri name): the
    workspace's `.agents/skills` and `.claude/skills`, the agent's substrate `skills/`, the user's own; or
    config.json's instead; then `--skills-dir`."""
    if configured is None:
        found = [
            ("workspace-agents", workspace, ".agents/skills", "/workspace/.agents/skills"),
            ("workspace-claude", workspace, ".claude/skills", "/workspace/.claude/skills"),
            ("agent-substrate", substrate, "skills", "/workspace/agent/skills"),
            ("user", user_skills_dir(), "", "user-skills"),
        ]
    else:
        found = [("config", p, "", f"config-skills-{i}") for i, p in enumerate(configured, 1)]
    return found + [("skills-dir", p, "", f"skills-dir-{i}") for i, p in enumerate(extra, 1)]


def workspace_root(workspace: Path | None) -> Path:
    """The workspace as given (default: the current directory), resolved."""
    return (workspace or Path.cwd()).expanduser().resolve()


def locate_data_dir(root: Path, data_dir: Path | None) -> Path:
    """The data dir for the workspace `root` (`--data-dir`, else the default), refused when it overlaps the
    workspace. When the workspace holds the user's own state directory (a client started the server in `/` or in
    the home directory with `--workspace .`), the workspace is the mistake and the message says so."""
    data = data_dir.expanduser().resolve() if data_dir else default_data_dir(root)
    if overlap(data, {"the workspace": root}) is not None and _within(state_root(), root):
        raise ConfigError(
            f"The workspace is {root}, which holds this user's own files and state (a client started the server "
            "there, or gave --workspace . from there): pass --workspace DIR with the project's directory."
        )
    refuse_overlap(data, {"the workspace": root})
    return data


def refuse_overlap(data_dir: Path, mounts: Mapping[str, Path]) -> None:
    if (problem := overlap(data_dir, mounts)) is not None:
        raise ConfigError(problem)


def _within(path: Path, root: Path) -> bool:
    """Component-wise containment of real paths (`/a/bc` is not inside `/a/b`)."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


def overlap(data_dir: Path, mounts: Mapping[str, Path]) -> str | None:
    """Why `data_dir` cannot serve these mounts (`"the workspace": root`, ...), or None when it lies outside them."""
    for what, root in mounts.items():
        if _within(data_dir, root):
            return (
                f"The data dir {data_dir} is inside {what} ({root}), where the tools could read the database: "
                "choose a --data-dir outside the workspace and every vault."
            )
        if _within(root, data_dir):
            return f"{what[0].upper()}{what[1:]} ({root}) is inside the data dir {data_dir}: choose another --data-dir."
    return None


def tell(message: str) -> None:
    """A notice for the person who started the command (stderr: stdout may carry the protocol)."""
    print(f"managed-tools: {message}", file=sys.stderr, flush=True)


def legacy_notice(workspace: Path) -> str | None:
    """The one line said at start-up when the workspace holds a `.managed-tools` directory, which is ignored."""
    legacy = workspace / LEGACY_DIR
    if not legacy.is_dir() or legacy.is_symlink():
        return None
    return (
        f"ignoring {legacy}: nothing inside the workspace configures this server. If it is your own old data dir, "
        f"`managed-tools adopt --workspace {workspace}` shows what it holds and moves it."
    )


def move_into_place(legacy: Path, data_dir: Path) -> bool:
    """Move `legacy` to `data_dir`, which must not exist; never merge. False when another process placed
    `data_dir` first (or moved `legacy` away).

    Safe when several run at once: the directory moves in one rename (on one filesystem), or is copied beside
    `data_dir` and renamed into place (across filesystems) before the old one is removed, so whoever loses the
    race finds `data_dir` complete. The database moves with its WAL and shared-memory files.
    """
    data_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.rename(legacy, data_dir)
    except FileNotFoundError:  # another process moved it first
        return False
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOTEMPTY, errno.EEXIST):
            raise
        if exc.errno != errno.EXDEV or not _copy_into_place(legacy, data_dir):
            return False  # data_dir exists: placed by another process
        shutil.rmtree(legacy, ignore_errors=True)
    return True


def _copy_into_place(source: Path, target: Path) -> bool:
    """Copy `source` beside `target` and rename it into place; False when another process placed it first."""
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}.partial")
    try:
        shutil.copytree(source, staging, symlinks=True)
        os.rename(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if target.exists():
            return False
        raise
    return True
