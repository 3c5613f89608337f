"""The managed catalogue: every tool family's definitions, in the order tools/list publishes them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from managed_tools.tools.discovery import tools as discovery
from managed_tools.tools.environment import tools as environment
from managed_tools.tools.files import tools as file_tools
from managed_tools.tools.framework.definitions import published
from managed_tools.tools.framework.definitions.definition import PermissionPolicy, ToolDefinition
from managed_tools.tools.framework.definitions.latent import as_declared
from managed_tools.tools.framework.definitions.names import ALL, USER_TOOLSETS, did_you_mean
from managed_tools.tools.framework.definitions.overrides import ToolOverride, overridden
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.definitions.toolsets import PRESETS, ToolSelection, select
from managed_tools.tools.framework.wire.errors import RegistryError
from managed_tools.tools.latent_calls import tools as latent_calls
from managed_tools.tools.memory import search as memory_search
from managed_tools.tools.memory import tools as memory_tools
from managed_tools.tools.outcomes import tools as outcome_tools
from managed_tools.tools.permissions import tools as permissions
from managed_tools.tools.planning import tools as planning
from managed_tools.tools.recall import tools as recall
from managed_tools.tools.sandbox import tools as sandbox
from managed_tools.tools.sessions import delegation, wakes
from managed_tools.tools.sessions import tools as session_tools
from managed_tools.tools.shell import tools as shell_tools
from managed_tools.tools.skills import tools as skill_tools
from managed_tools.tools.substrate import tools as substrate_tools

# The families (toolsets of `serve --toolsets`), in publishing order, each with what it is for.
FAMILIES: dict[str, tuple[ToolDefinition, ...]] = {
    "environment": environment.DEFINITIONS,
    "sessions": session_tools.DEFINITIONS + delegation.DEFINITIONS + wakes.DEFINITIONS,
    "outcomes": outcome_tools.DEFINITIONS,
    "memory": memory_tools.DEFINITIONS + memory_search.DEFINITIONS,
    "recall": recall.DEFINITIONS,
    "planning": planning.DEFINITIONS,
    "skills": skill_tools.DEFINITIONS,
    "files": file_tools.DEFINITIONS,
    "sandbox": sandbox.DEFINITIONS,
    "substrate": substrate_tools.DEFINITIONS,
    "shell": shell_tools.DEFINITIONS,
    "permissions": permissions.DEFINITIONS,  # last, as in the reference
}
PURPOSES: dict[str, str] = {
    "environment": "mounts, vaults, the agent setup",
    "sessions": "sessions, events, traces, child sessions, wakes",
    "outcomes": "what done means, grading, evaluation",
    "memory": "versioned memory stores and learnings",
    "recall": "search past sessions' events",
    "planning": "the session's plan and steps",
    "skills": "SKILL.md instructions",
    "files": "read, write, edit, glob, grep",
    "sandbox": "the sandbox view over files and shell",
    "substrate": "the agent's shared files, staged and promoted",
    "shell": "bash, commands, the persistent shell",
    "permissions": "permission posture and checks",
    "custom": "config.json's custom and latent tools",
    "extensions": "--tools-module tools",
    "mcp": "upstream MCP servers' tools",
}
# Every tool the package defines, as tools/framework/definitions/published.py publishes their schemas: the families, the
# way back for latent calls, and tool search's own.
BUILT_IN: tuple[ToolDefinition, ...] = (
    *(d for family in FAMILIES.values() for d in family),
    *latent_calls.DEFINITIONS,
    *discovery.DEFINITIONS,
)
_BUILT_IN_IDS = frozenset(id(d) for d in BUILT_IN)
assert PURPOSES.keys() == {*FAMILIES, *USER_TOOLSETS}
assert all({*p.toolsets} <= {*PURPOSES, ALL} and {*p.tools} <= {d.name for f in FAMILIES.values() for d in f}
           for p in PRESETS.values())  # fmt: skip


def checked(definition: ToolDefinition) -> bool:
    """Was this definition checked against the registry rules when its schemas were published? Only a built-in
    one as defined (not amended by the user's policy or overrides) while the published file is current."""
    return id(definition) in _BUILT_IN_IDS and published.current()


def toolsets(
    extra: Sequence[ToolDefinition] = (), extensions: Sequence[ToolDefinition] = ()
) -> dict[str, tuple[ToolDefinition, ...]]:
    """Every toolset and its tools in publishing order: the families, then the user's. `extra` are config.json's
    custom and latent tools (`custom`; a test's own tools go to `extensions`), `extensions` the --tools-module
    ones; a tool of ownership `mcp` is in `mcp` wherever it came from."""
    groups: dict[str, list[ToolDefinition]] = {name: list(family) for name, family in FAMILIES.items()}
    groups.update({name: [] for name in USER_TOOLSETS})
    for definition in map(as_declared, extra):
        declared = "custom" if definition.ownership in ("custom", "latent") else "extensions"
        groups["mcp" if definition.ownership == "mcp" else declared].append(definition)
    for definition in map(as_declared, extensions):
        groups["mcp" if definition.ownership == "mcp" else "extensions"].append(definition)
    for name in USER_TOOLSETS:
        if any(d.ownership == "latent" for d in groups[name]):
            # the way back for a latent call handed to the calling model, in the toolset of the first latent tools
            groups[name][:0] = latent_calls.DEFINITIONS
            break
    return {name: tuple(group) for name, group in groups.items()}


def build_registry(
    extra: Sequence[ToolDefinition] = (),
    policy: Mapping[str, PermissionPolicy] | None = None,
    *,
    overrides: Mapping[str, ToolOverride] | None = None,
    extensions: Sequence[ToolDefinition] = (),
    selection: ToolSelection | None = None,
    upstreams: Sequence[str] = (),
) -> Registry:
    """The managed tools plus the user's (`extra`, `extensions`: see `toolsets`), all checked against the
    registry rules, then narrowed to `selection`: the registry holds only the tools this server serves.

    `policy` is the user's per-tool override of permissionPolicy; naming a tool that does not exist is an error,
    so a typo never silently leaves a tool ungated (a tool the selection hides may be named). `overrides` (config
    `overrides`, tools/framework/definitions/overrides.py) are checked and applied after it, and name tools the same
    way.
    `upstreams` are the configured upstream servers, whose tools the selection may name before they are listed.
    """
    groups = toolsets(extra, extensions)
    policies, amended = dict(policy or {}), dict(overrides or {})
    names = [d.name for group in groups.values() for d in group]
    for what, entries in (("The permission policy", policies), ("config.json overrides", amended)):
        unknown = sorted(set(entries) - set(names))
        if unknown:
            named = ", ".join(f"{name}{did_you_mean(name, names)}" for name in unknown)
            raise RegistryError(f"{what} names tools that do not exist: {named}.")

    def amend(d: ToolDefinition) -> ToolDefinition:
        policed = d.model_copy(update={"permission_policy": policies[d.name]}) if d.name in policies else d
        return overridden(policed, amended[d.name]) if d.name in amended else policed

    # Before selecting: an override saying a tool writes keeps it out of --read-only.
    groups = {name: tuple(amend(d) for d in group) for name, group in groups.items()}
    registry = Registry()
    ours = {d.name for d in latent_calls.DEFINITIONS}
    for name, group in groups.items():
        for d in group:
            registry.add(d, user=name in USER_TOOLSETS and d.name not in ours, toolset=name, checked=checked(d))
    if selection is None:
        return registry
    return registry.only((d.name for d in select(groups, selection, upstreams=upstreams)), selection)
