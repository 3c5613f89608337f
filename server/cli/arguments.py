"""What a parsed command line comes to, for every command: the whole configuration its flags ask for, and a printout
a reader may cut short. Apart from server/cli/commands.py so that server/cli/serving.py (`serve`, `tools`,
`migrate`) uses them without importing the commands that import it."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from managed_tools.server.config.data_dir import ConfigError
from managed_tools.server.config.state_place import database_url

if TYPE_CHECKING:
    from managed_tools.server.config.serve_config import Selecting, ServeConfig


def cut_short_quietly(command: Callable[[], int]) -> int:
    """A reader that stops early (`| head -1`) ends a printout quietly and successfully, as with other tools."""
    try:
        status = command()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit and would report the same error: point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return status


def serve_config(args: argparse.Namespace) -> ServeConfig:
    """The whole configuration: the flags over the config files (server/config/serve_config.py)."""
    from managed_tools.server.config.serve_config import ServeConfig

    return ServeConfig.build(
        workspace=args.workspace,
        data_dir=args.data_dir,
        agent=getattr(args, "agent", "default"),
        session=getattr(args, "session", None) if args.command == "serve" else None,
        allow=tuple(getattr(args, "allow", ())),
        ask=tuple(getattr(args, "ask", ())),
        approval_wait_seconds=getattr(args, "approval_wait", None),
        tool_modules=tuple(getattr(args, "tools_module", ())),
        vaults=_vaults(getattr(args, "vault", [])),
        skills_dirs=tuple(Path(p) for p in getattr(args, "skills_dir", ())),
        selection=_selecting(args),
        database=database_url(args),
        auto_sandboxed=True if getattr(args, "auto_sandboxed", False) else None,  # else config.json's
        tool_search=getattr(args, "tool_search", None),
        result_format=getattr(args, "result_format", None),
    )


def _selecting(args: argparse.Namespace) -> Selecting:
    from managed_tools.server.config.serve_config import Selecting

    def flattened(name: str) -> tuple[str, ...] | None:
        given = getattr(args, name, None)
        return None if given is None else tuple(n for names in given for n in names)

    return Selecting(
        preset=getattr(args, "preset", None),
        toolsets=flattened("toolsets"),
        tools=flattened("tools"),
        exclude_tools=flattened("exclude_tools"),
        read_only=getattr(args, "read_only", None),
    )


def _vaults(specs: list[str]) -> dict[str, Path]:
    vaults: dict[str, Path] = {}
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if not sep or not name or not directory:
            raise ConfigError(f"--vault takes NAME=DIR, not {spec!r}.")
        vaults[name] = Path(directory)
    return vaults
