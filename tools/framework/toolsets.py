"""Toolsets: which tools a server publishes (`serve --toolsets/--tools/--exclude-tools/--read-only`).

A toolset is a family of `tools/` (as `tools/catalogue.py` lists them), or one of the user's: `mcp` (tools of
upstream MCP servers, ownership `mcp`), `custom` (config.json's custom and latent tools) and `extensions`
(`--tools-module`). A tool that is not selected does not exist for that server: it is left out of the registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from difflib import get_close_matches

from pydantic import BaseModel, ConfigDict

from managed_tools.tools.framework.definition import WRITE_EFFECTS, ToolDefinition
from managed_tools.tools.framework.errors import RegistryError

ALL = "all"
USER_TOOLSETS = ("custom", "extensions", "mcp")


class ToolSelection(BaseModel):
    """`toolsets=None` means every toolset, unless `tools` names some tools: then only those (`--tools` alone
    is a list of the tools to serve). `exclude_tools` beats both; `read_only` beats everything."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    toolsets: tuple[str, ...] | None = None
    tools: tuple[str, ...] = ()
    exclude_tools: tuple[str, ...] = ()
    read_only: bool = False


def reads_only(definition: ToolDefinition) -> bool:
    """Kept by `--read-only`: read-only, and nothing that writes or runs a program (`bash`'s read-only hand
    still runs one)."""
    return definition.read_only and not WRITE_EFFECTS.intersection(definition.effects)


def select(
    toolsets: Mapping[str, Sequence[ToolDefinition]], selection: ToolSelection, *, upstreams: Sequence[str] = ()
) -> list[ToolDefinition]:
    """The selected tools, in catalogue order; an unknown toolset or tool name is a RegistryError naming the
    valid ones. A name `<upstream>__<tool>` of a configured upstream is valid: its tools are listed later."""
    valid = (*toolsets, ALL)
    _refuse_unknown("toolset", selection.toolsets or (), valid)
    names = [d.name for group in toolsets.values() for d in group]
    later = tuple(f"{upstream}__" for upstream in upstreams)
    given = [name for name in (*selection.tools, *selection.exclude_tools) if not name.startswith(later)]
    _refuse_unknown("tool", given, names)
    return [d for name, group in toolsets.items() for d in group if keeps(selection, name, d)]


def keeps(selection: ToolSelection, toolset: str, definition: ToolDefinition) -> bool:
    """Does `selection` serve `definition` of `toolset`? Exclude beats include; read-only beats everything."""
    chosen = selection.toolsets if selection.toolsets is not None else () if selection.tools else (ALL,)
    return (
        (ALL in chosen or toolset in chosen or definition.name in selection.tools)
        and definition.name not in selection.exclude_tools
        and (reads_only(definition) or not selection.read_only)
    )


def _refuse_unknown(kind: str, given: Sequence[str], valid: Sequence[str]) -> None:
    unknown = [name for name in dict.fromkeys(given) if name not in valid]
    if unknown:
        named = ", ".join(f"{name!r}{did_you_mean(name, valid)}" for name in unknown)
        raise RegistryError(f"Unknown {kind} {named}; the {kind}s are: {', '.join(valid)}.")


def did_you_mean(name: str, valid: Sequence[str]) -> str:
    """` (did you mean 'x'?)` for the closest valid name, or nothing when none is close."""
    near = get_close_matches(name, valid, n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""
