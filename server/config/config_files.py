"""The config.json files a server reads: the user-wide one, merged under the workspace's (in its data dir).

Written once in `<user config dir>/managed-tools/config.json`, a policy or an `mcpServers` list applies to every
workspace; a workspace's own `config.json` wins key by key. The maps keyed by a name (`mcpServers`, `models`,
`policy`, `overrides`, `variables`, `vaults`) merge entry by entry: the workspace's entry replaces the user's of the
same name, and a `null` entry removes the user's. Every other key is replaced whole. Neither file may lie where a
tool can write (inside the workspace or a vault): that would let a model configure its own server.

Only json and paths here, so that the approval commands and `where` read the files without loading the catalogue;
server/config/serve_config.py validates the merged document.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from managed_tools.server.config.data_dir import ConfigError, user_config_home
from managed_tools.tools.framework.definitions.names import did_you_mean

CONFIG_FILE = "config.json"
MERGED_BY_NAME = ("mcpServers", "models", "policy", "overrides", "variables", "vaults")
# Every key config.json takes (server/config/serve_config.py's UserConfig, by alias; a test keeps the two equal).
KEYS = (
    "policy", "approvalWaitSeconds", "customTools", "latentTools", "promptTools", "vaults", "skills", "oauth",
    "approvals", "variables", "mcpServers", "preset", "toolsets", "tools", "excludeTools", "readOnly",
    "requestStateKeys", "vaultKey", "sandbox", "autoSandboxed", "substrateDefaults", "budgets", "quotas", "telemetry",
    "models", "secretScanning", "toolSearch", "resultFormat", "overrides", "retention",
)  # fmt: skip


def user_config_file() -> Path:
    return user_config_home() / CONFIG_FILE


@dataclass(frozen=True)
class ConfigFiles:
    """The two files as read (an absent file reads as `{}`), and the document they make together."""

    workspace_file: Path
    user_file: Path
    workspace: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # what a lenient read passed over (each file's first fault)

    @property
    def merged(self) -> dict[str, Any]:
        merged = {**self.user, **self.workspace}
        for key in MERGED_BY_NAME:
            mine, theirs = self.user.get(key), self.workspace.get(key)
            if isinstance(theirs, dict):  # else the workspace's value replaces the user's whole, or there is none
                both = {**(mine if isinstance(mine, dict) else {}), **theirs}
                merged[key] = {name: value for name, value in both.items() if value is not None}
        return merged

    def source(self, location: Sequence[str | int]) -> Path:
        """The file the value at `location` (a path of keys into the merged document) came from."""
        key = location[0] if location else None
        if key in MERGED_BY_NAME and len(location) > 1 and isinstance(self.workspace.get(str(key)), dict):
            return self.workspace_file if location[1] in self.workspace[str(key)] else self.user_file
        return self.workspace_file if key in self.workspace or key is None else self.user_file


def read_config_files(data_dir: Path, mounts: Mapping[str, Path], *, lenient: bool = False) -> ConfigFiles:
    """Both files, each a JSON object with known top-level keys; refused when the user's sits inside a mount.

    `lenient` (the approval commands) reads a file that is not valid JSON as `{}` and leaves out unknown keys,
    saying so in `problems`, so that a person can still answer while the file is being fixed."""
    refuse_reachable(mounts)
    user_file, workspace_file = user_config_file(), data_dir / CONFIG_FILE
    if not lenient:
        return ConfigFiles(workspace_file, user_file, _read(workspace_file), _read(user_file))
    (workspace, fault), (user, user_fault) = _read_leniently(workspace_file), _read_leniently(user_file)
    problems = tuple(problem for problem in (fault, user_fault) if problem)
    return ConfigFiles(workspace_file, user_file, workspace, user, problems)


def _read_leniently(path: Path) -> tuple[dict[str, Any], str | None]:
    """The file's known keys, and what was passed over: the whole file when it is not a JSON object (an unreadable
    one is still refused), or its unknown keys."""
    try:
        document = _parsed(path)
    except ConfigError as exc:
        if not path.is_file():
            raise
        return {}, f"{exc} It was passed over."
    refusal = _unknown_key(path, document)
    known = {key: value for key, value in document.items() if key in KEYS}
    return known, None if refusal is None else f"{refusal} The rest of it was read."


def refuse_reachable(mounts: Mapping[str, Path]) -> None:
    """The user config directory lies outside every mount, whether its config.json exists yet or not (a tool that
    could create it would configure every later server)."""
    home = os.path.realpath(user_config_home())
    for what, root in mounts.items():
        if Path(home).is_relative_to(os.path.realpath(root)):
            raise ConfigError(
                f"The user config directory {home} is inside {what} ({root}), where a tool could change it: "
                "pass --workspace DIR with the project's directory (or set XDG_CONFIG_HOME elsewhere)."
            )


def _read(path: Path) -> dict[str, Any]:
    document = _parsed(path)
    refusal = _unknown_key(path, document)
    if refusal is not None:
        raise ConfigError(refusal)
    return document


def _parsed(path: Path) -> dict[str, Any]:
    """The file as a JSON object (an absent one reads as `{}`), keys unchecked."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):  # a data dir that is a file is said when the state opens
        return {}
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
    except ValueError as exc:  # not JSON, or not UTF-8
        raise ConfigError(f"{path} is not valid JSON in UTF-8: {exc}.") from exc
    if not isinstance(document, dict):
        raise ConfigError(f"{path} must hold a JSON object, not {type(document).__name__}.")
    return document


def _unknown_key(path: Path, document: dict[str, Any]) -> str | None:
    """The refusal of the first key config.json does not take, or None."""
    key = next((key for key in document if key not in KEYS), None)
    if key is None:
        return None
    return f"{path}: unknown key {key!r}{did_you_mean(key, KEYS)}; the keys are: {', '.join(KEYS)}."
