"""The managed catalogue: every tool family's definitions, in the order tools/list publishes them."""

from __future__ import annotations

from tools import environment, session_tools
from tools.definition import ToolDefinition
from tools.registry import Registry

FAMILIES: tuple[tuple[ToolDefinition, ...], ...] = (
    environment.DEFINITIONS,
    session_tools.DEFINITIONS,
)


def build_registry(extra: tuple[ToolDefinition, ...] = ()) -> Registry:
    """The managed tools plus `extra` (user or test tools), all checked against the registry rules."""
    return Registry([definition for family in FAMILIES for definition in family] + list(extra))
