"""Loading the user's own tools: a Python module named on the command line that exposes `TOOLS`.

    managed-tools serve --tools-module my_tools

`my_tools.TOOLS` is a sequence of `tools.definition.ToolDefinition`; they pass the same registry rules and run
through the same executor (validation, permission pauses, transactions, events) as the managed catalogue.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from tools.definition import ToolDefinition


class ExtensionError(Exception):
    """A tools module could not be loaded; the message names the module and the problem."""


def load_tools(modules: Iterable[str]) -> tuple[ToolDefinition, ...]:
    loaded: list[ToolDefinition] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise ExtensionError(f"Cannot import tools module {name!r}: {type(exc).__name__}: {exc}") from exc
        tools = getattr(module, "TOOLS", None)
        if tools is None:
            raise ExtensionError(f"Tools module {name!r} has no TOOLS sequence.")
        bad = [type(t).__name__ for t in tools if not isinstance(t, ToolDefinition)]
        if bad:
            raise ExtensionError(f"TOOLS in {name!r} must hold ToolDefinition objects, found {', '.join(bad)}.")
        loaded.extend(tools)
    return tuple(loaded)
