"""Where a workspace's state is, as the approval commands and `where` need it: no pydantic, no SDK."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from managed_tools.server.config.config_files import ConfigFiles, read_config_files
from managed_tools.server.config.data_dir import (
    BUSY_TIMEOUT_MS,
    STATE_FILE,
    ConfigError,
    legacy_notice,
    locate_data_dir,
    tell,
    workspace_root,
)
from managed_tools.server.config.rules import DATABASE_ENV
from managed_tools.stores.db import is_database_url

DATABASE_RULE = "--database takes a PostgreSQL URL (postgresql://user@host:port/dbname); SQLite needs no option."


def database_url(args: argparse.Namespace) -> str | None:
    """`--database`, else $MANAGED_TOOLS_DATABASE: a PostgreSQL URL; None keeps the state in SQLite."""
    return getattr(args, "database", None) or os.environ.get(DATABASE_ENV) or None


@dataclass(frozen=True)
class StatePlace:
    """The workspace, its data dir and its database (a ServeConfig says the same, with everything else)."""

    workspace: Path
    data_dir: Path
    database: str | None
    busy_timeout_ms: int = BUSY_TIMEOUT_MS

    @classmethod
    def of(cls, args: argparse.Namespace) -> StatePlace:
        """From the flags, as `serve` finds it (a workspace's `.managed-tools` is never read: `managed-tools adopt`)."""
        root = workspace_root(args.workspace)
        url = database_url(args)
        if url is not None and not is_database_url(url):
            raise ConfigError(DATABASE_RULE)
        data = locate_data_dir(root, args.data_dir)
        if (ignored := legacy_notice(root)) is not None:  # as `serve` says it: never read, a workspace is anyone's
            tell(ignored)
        return cls(root, data, url)

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def state(self) -> Path | str:
        return self.database or self.state_path

    def config_files(self, *, lenient: bool = False) -> ConfigFiles:
        return read_config_files(self.data_dir, {"the workspace": self.workspace}, lenient=lenient)
