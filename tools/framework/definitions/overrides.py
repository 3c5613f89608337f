"""config.json `overrides`: per tool (ours, a custom one, an upstream's), its title, description, annotations, a
stricter permission policy, and result fields kept out of the model's context.

An override only ever tightens what a client is told and what runs unasked: `permissionPolicy: "always_ask"` and
hints that say "may write / destroy / reach out / not idempotent" are taken; the other way round (a writing tool
called read-only, an asking tool allowed) is a configuration error, because a client may auto-approve on a hint.
Pre-approving stays the `policy` key's, which says so plainly. A tool whose author set `accepts_overrides=False`
keeps its own title and description (seed 002): its words are a contract, not a label.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from managed_tools.tools.framework.definitions.definition import PermissionPolicy, ToolDefinition
from managed_tools.tools.framework.definitions.registry import MAX_DESCRIPTION_CHARS, MAX_UPSTREAM_DESCRIPTION_CHARS
from managed_tools.tools.framework.wire.errors import RegistryError

MAX_TITLE_CHARS = 100


class Hints(BaseModel):
    """MCP's tool annotations, as config.json spells them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    read_only_hint: bool | None = Field(default=None, alias="readOnlyHint")
    destructive_hint: bool | None = Field(default=None, alias="destructiveHint")
    idempotent_hint: bool | None = Field(default=None, alias="idempotentHint")
    open_world_hint: bool | None = Field(default=None, alias="openWorldHint")


class ToolOverride(BaseModel):
    """One tool's entry under `overrides`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    title: str | None = Field(default=None, min_length=1, max_length=MAX_TITLE_CHARS)
    description: str | None = Field(default=None, min_length=1, max_length=MAX_UPSTREAM_DESCRIPTION_CHARS)
    annotations: Hints | None = None
    permission_policy: PermissionPolicy | None = Field(default=None, alias="permissionPolicy")
    # Top-level fields of the tool's result the model never sees; the person (the result's `_meta`) and the audit
    # (their digests in the span event) do. Not a security boundary: a secret belongs in a secret variable.
    exclude_from_context: tuple[str, ...] = Field(default=(), alias="excludeFromContext", max_length=32)


def overridden(definition: ToolDefinition, override: ToolOverride) -> ToolDefinition:
    """`definition` as `override` amends it; RegistryError (naming the tool and the key) for anything looser or
    not accepted."""
    name = definition.name
    where = f"config.json overrides.{name}"
    update: dict[str, object] = {}
    if override.title is not None or override.description is not None:
        if not definition.accepts_overrides:
            raise RegistryError(
                f"{where}: {name} does not accept a new title or description (its words are a contract)."
            )
        limit = MAX_UPSTREAM_DESCRIPTION_CHARS if definition.ownership == "mcp" else MAX_DESCRIPTION_CHARS
        if override.description is not None and len(override.description) > limit:
            raise RegistryError(f"{where}.description: at most {limit} characters for this tool.")
        update |= {k: v for k, v in (("title", override.title), ("description", override.description)) if v}
    if override.permission_policy is not None:
        update["permission_policy"] = _policy(where, definition.permission_policy, override.permission_policy)
    if override.annotations is not None:
        update |= _hints(where, definition, override.annotations)
    if override.exclude_from_context:
        fields = set(definition.output_schema().get("properties", {}))
        unknown = sorted(set(override.exclude_from_context) - fields)
        if unknown:
            raise RegistryError(f"{where}.excludeFromContext: {name}'s result has no field {', '.join(unknown)}; "
                                f"its fields are {', '.join(sorted(fields)) or 'none'}.")  # fmt: skip
        update["context_excluded"] = tuple(dict.fromkeys(override.exclude_from_context))
    return definition.model_copy(update=update)


def _policy(where: str, own: PermissionPolicy, wanted: PermissionPolicy) -> PermissionPolicy:
    if own == "always_ask" and wanted == "always_allow":
        raise RegistryError(
            f"{where}.permissionPolicy: always_allow is looser than the tool's own always_ask; an override only "
            "tightens. To pre-approve a tool, name it under `policy` instead."
        )
    return wanted


def _hints(where: str, definition: ToolDefinition, hints: Hints) -> dict[str, object]:
    """Each hint may only say the tool does more than it says now (writes, destroys, reaches out, repeats
    differently); never less."""
    looser = [
        name
        for name, given, loosens in (
            ("readOnlyHint", hints.read_only_hint, hints.read_only_hint is True and not definition.read_only),
            ("destructiveHint", hints.destructive_hint, hints.destructive_hint is False and definition.destructive),
            ("idempotentHint", hints.idempotent_hint, hints.idempotent_hint is True and not definition.idempotent),
            ("openWorldHint", hints.open_world_hint, hints.open_world_hint is False and definition.open_world),
        )
        if given is not None and loosens
    ]
    if looser:
        raise RegistryError(
            f"{where}.annotations: {', '.join(looser)} would claim {definition.name} does less than it does; "
            "an override only tightens (a client may run a read-only or harmless tool unasked)."
        )
    update: dict[str, object] = {}
    if hints.read_only_hint is False:
        update["read_only"] = False
    if hints.destructive_hint is True:
        update["destructive"] = True
    if hints.idempotent_hint is False:
        update["idempotent"] = False
    if hints.open_world_hint is True:
        update["open_world"] = True
    return update
