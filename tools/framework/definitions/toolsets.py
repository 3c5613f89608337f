"""Toolsets: which tools a server publishes (`serve --preset/--toolsets/--tools/--exclude-tools/--read-only`).

A toolset is a family of `tools/` (as `tools/catalogue.py` lists them), or one of the user's: `mcp` (tools of
upstream MCP servers, ownership `mcp`), `custom` (config.json's custom and latent tools) and `extensions`
(`--tools-module`). A tool that is not selected does not exist for that server: it is left out of the registry.

A preset names a base selection of toolsets for a kind of client (docs/presets.md says why each holds what it
holds); `toolsets` and `tools` add to it, `exclude_tools` takes away, `read_only` filters the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from managed_tools.tools.framework.definitions.definition import WRITE_EFFECTS, ToolDefinition
from managed_tools.tools.framework.definitions.names import ALL, USER_TOOLSETS, unknown
from managed_tools.tools.framework.wire.errors import RegistryError


class Preset(BaseModel):
    """A base selection: whole toolsets, and single tools of others that the served ones point to (a search hit's
    or an evaluation's next step), so that no suggestion names a tool this server does not have."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    toolsets: tuple[str, ...]
    tools: tuple[str, ...] = ()
    tool_search: bool = False  # list a core and search the rest (`--tool-search`) unless told otherwise


# Every preset serves the user's own toolsets: a person who configured an upstream server or a custom tool meant it.
# docs/presets.md says why each holds what it holds.
PRESETS: dict[str, Preset] = {
    # For clients with their own file, edit and shell tools (Claude Code, Cursor, VS Code): what they lack, and of
    # that only a core listed at connect; the rest is one tools_search away (docs/tool-search.md).
    "coding": Preset(
        toolsets=("sessions", "outcomes", "memory", "recall", "planning", "skills", "permissions", *USER_TOOLSETS),
        tools=("agent_compare_setup",),
        tool_search=True,
    ),
    # Versioned memory and the curated substrate; outcomes because a promotion is gated on a passing one.
    "memory": Preset(
        toolsets=("outcomes", "memory", "recall", "substrate", "permissions", *USER_TOOLSETS),
        tools=("session_get_snapshot", "session_get_events", "session_get_trace", "agent_compare_setup"),
    ),
    "full": Preset(toolsets=(ALL,)),  # the default: every toolset
}


class ToolSelection(BaseModel):
    """Without a preset, `toolsets=None` means every toolset, unless `tools` names some tools: then only those
    (`--tools` alone is a list of the tools to serve). With a preset, its toolsets are the base and `toolsets`
    and `tools` add to it. `exclude_tools` beats all of these; `read_only` beats everything."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    preset: str | None = None
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
    """The selected tools, in catalogue order; an unknown preset, toolset or tool name is a RegistryError naming
    the valid ones. A name `<upstream>__<tool>` of a configured upstream is valid: its tools are listed later."""
    _refuse_unknown("preset", (selection.preset,) if selection.preset else (), tuple(PRESETS))
    _refuse_unknown("toolset", selection.toolsets or (), (*toolsets, ALL))
    names = [d.name for group in toolsets.values() for d in group]
    later = tuple(f"{upstream}__" for upstream in upstreams)
    given = [name for name in (*selection.tools, *selection.exclude_tools) if not name.startswith(later)]
    _refuse_unknown("tool", given, names)
    return [d for name, group in toolsets.items() for d in group if keeps(selection, name, d)]


def chosen(selection: ToolSelection) -> Preset:
    """What is served before exclusions: the preset's toolsets and tools plus `toolsets` and `tools`; without a
    preset, `toolsets`, else every toolset unless `tools` lists the tools to serve."""
    if selection.preset is not None:
        base = PRESETS[selection.preset]
        return Preset(toolsets=(*base.toolsets, *(selection.toolsets or ())), tools=(*base.tools, *selection.tools))
    toolsets = selection.toolsets if selection.toolsets is not None else () if selection.tools else (ALL,)
    return Preset(toolsets=toolsets, tools=selection.tools)


def keeps(selection: ToolSelection, toolset: str, definition: ToolDefinition) -> bool:
    """Does `selection` serve `definition` of `toolset`? Exclude beats include; read-only beats everything."""
    base = chosen(selection)
    return (
        (ALL in base.toolsets or toolset in base.toolsets or definition.name in base.tools)
        and definition.name not in selection.exclude_tools
        and (reads_only(definition) or not selection.read_only)
    )


def _refuse_unknown(kind: str, given: Sequence[str], valid: Sequence[str]) -> None:
    refusal = unknown(kind, given, valid)
    if refusal:
        raise RegistryError(refusal)
