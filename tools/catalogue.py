"""The managed catalogue: every tool family's definitions, in the order tools/list publishes them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from managed_tools.tools.definition import PermissionPolicy, ToolDefinition
from managed_tools.tools.environment import tools as environment
from managed_tools.tools.errors import RegistryError
from managed_tools.tools.files import tools as file_tools
from managed_tools.tools.latent_calls import tools as latent_calls
from managed_tools.tools.memory import search as memory_search
from managed_tools.tools.memory import tools as memory_tools
from managed_tools.tools.outcomes import tools as outcome_tools
from managed_tools.tools.permissions import tools as permissions
from managed_tools.tools.planning import tools as planning
from managed_tools.tools.recall import tools as recall
from managed_tools.tools.registry import Registry
from managed_tools.tools.sandbox import tools as sandbox
from managed_tools.tools.sessions import delegation
from managed_tools.tools.sessions import tools as session_tools
from managed_tools.tools.shell import tools as shell_tools
from managed_tools.tools.skills import tools as skill_tools
from managed_tools.tools.substrate import tools as substrate_tools

FAMILIES: tuple[tuple[ToolDefinition, ...], ...] = (
    environment.DEFINITIONS,
    session_tools.DEFINITIONS,
    delegation.DEFINITIONS,
    outcome_tools.DEFINITIONS,
    memory_tools.DEFINITIONS,
    memory_search.DEFINITIONS,
    recall.DEFINITIONS,
    planning.DEFINITIONS,
    skill_tools.DEFINITIONS,
    file_tools.DEFINITIONS,
    sandbox.DEFINITIONS,
    substrate_tools.DEFINITIONS,
    shell_tools.DEFINITIONS,
    permissions.DEFINITIONS,  # last, as in the reference
)


def build_registry(
    extra: tuple[ToolDefinition, ...] = (), policy: Mapping[str, PermissionPolicy] | None = None
) -> Registry:
    """The managed tools plus `extra` (user or test tools), all checked against the registry rules.

    `policy` is the user's per-tool override of permissionPolicy; naming a tool that does not exist is an error,
    so a typo never silently leaves a tool ungated.
    """
    managed = [definition for family in FAMILIES for definition in family]
    if any(definition.ownership == "latent" for definition in extra):
        managed.extend(latent_calls.DEFINITIONS)  # the way back for a latent call handed to the calling model
    overrides = dict(policy or {})
    unknown = sorted(set(overrides) - {d.name for d in [*managed, *extra]})
    if unknown:
        raise RegistryError(f"The permission policy names tools that do not exist: {', '.join(unknown)}.")

    def applied(definitions: Iterable[ToolDefinition]) -> list[ToolDefinition]:
        return [d.model_copy(update={"permission_policy": overrides[d.name]}) if d.name in overrides else d
                for d in definitions]  # fmt: skip

    return Registry(applied(managed), user=applied(extra))
