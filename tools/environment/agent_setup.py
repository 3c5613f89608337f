"""`agent_describe_setup`, `agent_compare_setup` and `vault_list` (reference §2a): the setup contract a session
ran under, read back from what attach recorded, and the vaults mounted now (names and paths, never contents) beside
the names of the agent's secrets (never values)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from managed_tools.stores import vault
from managed_tools.tools.environment.setup import (
    SECTIONS,
    AgentSetup,
    SectionName,
    VaultView,
    recorded_setup,
    vaults,
)
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.scope import scoped_session
from managed_tools.tools.framework.context.uris import view_uri
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments, NoArguments, SessionId, WireModel
from managed_tools.tools.framework.wire.sections import one_of


class SetupInput(Arguments):
    session_id: SessionId | None = None


class DescribeSetupInput(SetupInput):
    sections: Annotated[
        list[SectionName] | None,
        BeforeValidator(one_of(SECTIONS, "section")),
        Field(description="Only these sections."),
    ] = None


class DescribeSetupOutput(WireModel):
    session_id: str
    available: bool
    wake_id: str | None = Field(description="The wake whose setup this is (the current one for this session).")
    fingerprint: str | None
    recorded_at: str | None
    resource_uri: str = Field(description="The same contract as an MCP resource (the reference's artifact file).")
    agent_setup: AgentSetup | None
    reason: str | None


async def agent_describe_setup(ctx: ToolContext, args: DescribeSetupInput) -> DescribeSetupOutput:
    session = await scoped_session(ctx, args.session_id)
    found = await recorded_setup(ctx, session.id)
    return DescribeSetupOutput(
        session_id=session.id,
        available=found.setup is not None,
        wake_id=found.wake_id,
        fingerprint=found.fingerprint,
        recorded_at=found.recorded_at,
        resource_uri=view_uri("agent_setup", session.id),
        agent_setup=None if found.setup is None else found.setup.only(args.sections),
        reason=found.reason,
    )


class CompareSetupOutput(WireModel):
    current_session_id: str
    target_session_id: str
    same_setup: bool
    current_fingerprint: str | None
    target_fingerprint: str | None
    changed_sections: list[SectionName] = Field(
        description="Sections whose fingerprints differ; every section when the target's contract is unknown."
    )
    changed_tools: list[str] = Field(description="Tools added, removed, changed or re-gated between the two.")
    current_resource_uri: str
    target_resource_uri: str
    reason: str | None


def _tool_differences(current: AgentSetup, target: AgentSetup) -> list[str]:
    ours = {t.name: t for t in current.tools.tools}
    theirs = {t.name: t for t in target.tools.tools}
    asked = set(current.policy.always_ask) ^ set(target.policy.always_ask)
    some = set(current.policy.asks_for_some_arguments) ^ set(target.policy.asks_for_some_arguments)
    changed = {name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name)}
    return sorted(changed | asked | some)


async def agent_compare_setup(ctx: ToolContext, args: SetupInput) -> CompareSetupOutput:
    target = await scoped_session(ctx, args.session_id)
    current = await recorded_setup(ctx, ctx.session_id)
    other = await recorded_setup(ctx, target.id)
    changed: list[SectionName] = list(SECTIONS)
    tools: list[str] = []
    if current.setup is not None and other.setup is not None:
        ours, theirs = current.setup.section_fingerprints(), other.setup.section_fingerprints()
        changed = [name for name in SECTIONS if ours[name] != theirs[name]]
        tools = _tool_differences(current.setup, other.setup)
    return CompareSetupOutput(
        current_session_id=ctx.session_id,
        target_session_id=target.id,
        same_setup=current.fingerprint is not None and current.fingerprint == other.fingerprint,
        current_fingerprint=current.fingerprint,
        target_fingerprint=other.fingerprint,
        changed_sections=[] if current.fingerprint == other.fingerprint else changed,
        changed_tools=tools,
        current_resource_uri=view_uri("agent_setup", ctx.session_id),
        target_resource_uri=view_uri("agent_setup", target.id),
        reason=current.reason or other.reason,
    )


class SecretView(WireModel):
    name: str
    scope: str = Field(description="agent: the agent's encrypted vault, used by every session of the agent.")
    set_at: str


class VaultListOutput(WireModel):
    count: int
    vaults: list[VaultView]
    secrets: list[SecretView] = Field(description="The secrets in the agent's vault: names only, never values.")


async def vault_list(ctx: ToolContext, _: NoArguments) -> VaultListOutput:
    found = vaults(ctx.runtime)
    stored = await vault.list_secrets(ctx.tx, ctx.agent_id)
    return VaultListOutput(count=len(found), vaults=found, secrets=[SecretView(**info.model_dump()) for info in stored])


DEFINITIONS = (
    ToolDefinition(
        name="agent_describe_setup",
        title="Describe the agent setup",
        description="The setup contract a session of this agent ran under, by section, with fingerprints.",
        input_model=DescribeSetupInput,
        output_model=DescribeSetupOutput,
        handler=agent_describe_setup,
        effects=("session_read", "resource_read"),
    ),
    ToolDefinition(
        name="agent_compare_setup",
        title="Compare agent setups",
        description="Compare this session's setup with another of this agent's before reusing its work: which "
        "sections and tools changed.",
        input_model=SetupInput,
        output_model=CompareSetupOutput,
        handler=agent_compare_setup,
        effects=("session_read", "resource_read"),
    ),
    ToolDefinition(
        name="vault_list",
        title="List vaults",
        description="List the read-only vaults mounted for this session and the names of the agent's secrets; "
        "never contents or values.",
        input_model=NoArguments,
        output_model=VaultListOutput,
        handler=vault_list,
        effects=("resource_read",),
        idempotent=True,
    ),
)
