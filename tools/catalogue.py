"""The managed catalogue: every tool family's definitions, in the order tools/list publishes them."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from managed_tools.tools.discovery import tools as discovery
from managed_tools.tools.framework.definitions import published
from managed_tools.tools.framework.definitions.definition import PermissionPolicy, ToolDefinition
from managed_tools.tools.framework.definitions.described import Described, record
from managed_tools.tools.framework.definitions.latent import as_declared
from managed_tools.tools.framework.definitions.names import ALL, USER_TOOLSETS, did_you_mean
from managed_tools.tools.framework.definitions.overrides import ToolOverride, overridden
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.definitions.toolsets import PRESETS, ToolSelection, select
from managed_tools.tools.framework.wire.errors import RegistryError
from managed_tools.tools.latent_calls import tools as latent_calls

# The families (toolsets of `serve --toolsets`), in publishing order: the modules (under managed_tools.tools)
# whose DEFINITIONS make each, imported only when a tool of theirs is first used (described.py).
FAMILY_MODULES: dict[str, tuple[str, ...]] = {
    "environment": ("environment.tools",),
    "sessions": ("sessions.tools", "sessions.delegation", "sessions.wakes"),
    "outcomes": ("outcomes.tools",),
    "memory": ("memory.tools", "memory.search"),
    "recall": ("recall.tools",),
    "planning": ("planning.tools",),
    "skills": ("skills.tools",),
    "files": ("files.tools",),
    "sandbox": ("sandbox.tools",),
    "substrate": ("substrate.tools",),
    "shell": ("shell.tools",),
    "permissions": ("permissions.tools",),  # last, as in the reference
}


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"managed_tools.tools.{name}")


def _defined(module: str) -> tuple[ToolDefinition, ...]:
    definitions: tuple[ToolDefinition, ...] = _module(module).DEFINITIONS
    return definitions


def from_code() -> dict[str, tuple[ToolDefinition, ...]]:
    """Every family's definitions as its modules define them (importing every family)."""
    return {family: tuple(d for m in modules for d in _defined(m)) for family, modules in FAMILY_MODULES.items()}


def records() -> list[dict[str, Any]]:
    """What the published file records of the families' tools, from their code (tests/support/snapshot_tools.py)."""
    return [record(family, m, d) for family, modules in FAMILY_MODULES.items() for m in modules for d in _defined(m)]


@functools.cache
def _code(module: str, name: str) -> ToolDefinition:
    return next(d for d in _defined(module) if d.name == name)


def described() -> dict[str, tuple[ToolDefinition, ...]] | None:
    """The families as the published file describes them, or None when it is not current or does not describe
    them (then they are built from code: a file that does not match is never served)."""
    entries = published.tools()
    if entries is None:
        return None
    families: dict[str, list[ToolDefinition]] = {family: [] for family in FAMILY_MODULES}
    for entry in entries:
        family, module, name = entry.get("family"), entry.get("module"), entry.get("name")
        if not (isinstance(family, str) and isinstance(name, str) and module in FAMILY_MODULES.get(family, ())):
            return None
        try:
            families[family].append(Described.of(entry, functools.partial(_code, str(module), name)))
        except (ValueError, KeyError):  # ValidationError is a ValueError
            return None
    return {family: tuple(tools) for family, tools in families.items()}


FAMILIES: dict[str, tuple[ToolDefinition, ...]] = described() or from_code()
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
def built_in(families: Mapping[str, Sequence[ToolDefinition]]) -> tuple[ToolDefinition, ...]:
    return (*(d for family in families.values() for d in family), *latent_calls.DEFINITIONS, *discovery.DEFINITIONS)


BUILT_IN = built_in(FAMILIES)
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
