"""The server's `instructions`: what it is, the toolsets it serves, and which tool to reach for first."""

from __future__ import annotations

from typing import Literal

from managed_tools.tools.catalogue import PURPOSES
from managed_tools.tools.framework.definitions.registry import Registry

MAX_INSTRUCTIONS_BYTES = 2048  # clients cut or drop longer instructions
# Where a model starts, best first (two are named): orient (mounts, setup), the session it is in, the files.
FIRST_TOOLS = ("environment_describe", "session_get_snapshot", "read")


ENGINES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def instructions(registry: Registry, engine: Literal["sqlite", "postgresql"]) -> str:
    """Only what this server serves (a hidden toolset or tool is never named), and the engine state is kept in."""
    served = registry.toolsets()
    families = "; ".join(f"{name} ({PURPOSES[name]})" for name in PURPOSES if served.get(name))
    first = [name for name in FIRST_TOOLS if name in registry][:2]
    start = f" Start with {' then '.join(first)}." if first else ""
    asks = " Tools marked always_ask wait for a person's approval." if any(
        d.permission_policy == "always_ask" for d in registry
    ) else ""  # fmt: skip
    # The schema, not the model: a family's code is imported at its first call, not to write these words.
    current = " A sessionId left out means the current session." if any(
        "sessionId" in d.input_schema().get("properties", {}) for d in registry
    ) else ""  # fmt: skip
    search = (
        " Most tools are not listed: find them with tools_search, read their schemas with tools_describe, then call "
        "them by name once listed, else through tools_call."
        if "tools_search" in registry
        else ""
    )
    return (
        "managed-tools runs a managed tool catalogue safely: arguments are validated, state is versioned in "
        f"{ENGINES[engine]} "
        f'and every call is recorded.{asks}{current} Numbers and booleans may be given as strings ("3", "true"). '
        f"Toolsets served: {families or 'none'}.{start}{search}"
    )
