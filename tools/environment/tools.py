"""The environment family: `environment_describe` (the agent, the mounted resources and the setup fingerprints,
computed in `setup`), then the setup contract and vault tools (`agent_setup`)."""

from __future__ import annotations

from typing import Annotated, Literal
from weakref import WeakKeyDictionary

from pydantic import BeforeValidator

from managed_tools.stores.ids import canonical_json, sha256_hex
from managed_tools.tools.environment import agent_setup
from managed_tools.tools.environment.setup import (
    AgentSetup,
    ConfinementView,
    MountedResource,
    confinement_view,
    live_setup,
    mounted_resources,
)
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.models import Arguments, WireModel
from managed_tools.tools.framework.wire.sections import PART_NAMES, Partial, one_of


class SandboxInfo(WireModel):
    mode: Literal["workspace"]
    default_cwd: str


class EnvironmentOutput(Partial):
    ALWAYS = frozenset({"id", "agent_id", "fingerprint"})

    id: str
    name: str
    kind: Literal["local"]
    fingerprint: str
    resource_contract_fingerprint: str
    agent_setup_fingerprint: str
    agent_id: str
    server_version: str
    sandbox: SandboxInfo
    workspace_mount_defaults: list[str]
    mounted_resources: list[MountedResource]
    confinement: ConfinementView


class EnvironmentInput(Arguments):
    sections: Annotated[list[str] | None, BeforeValidator(one_of(EnvironmentOutput.parts(), "section")), PART_NAMES] = (
        None
    )


# The answer depends only on what the live setup contract is built from (the environment, the confinement, the
# catalogue; tools/environment/setup.py `_live`), so it is built once per contract and shared (`only` copies it).
_DESCRIBED: WeakKeyDictionary[Registry, tuple[AgentSetup, EnvironmentOutput]] = WeakKeyDictionary()


async def environment_describe(ctx: ToolContext, args: EnvironmentInput) -> EnvironmentOutput:
    runtime = ctx.runtime
    setup, _ = live_setup(runtime)
    cached = _DESCRIBED.get(runtime.registry)
    if cached is None or cached[0] is not setup:
        cached = _DESCRIBED[runtime.registry] = (setup, _described(runtime, setup))
    return cached[1].only(args.sections)


def _described(runtime: Runtime, setup: AgentSetup) -> EnvironmentOutput:
    env = runtime.environment
    resources = mounted_resources(runtime)
    identity = {"server": env.server_name, "agent": env.agent_id, "mounts": [r.mount_path for r in resources]}
    return EnvironmentOutput(
        id=f"local:{env.agent_id}",
        name=f"{env.server_name} (agent {env.agent_id})",
        kind="local",
        fingerprint=sha256_hex(canonical_json(identity)),
        resource_contract_fingerprint=setup.resource_contract.fingerprint,
        agent_setup_fingerprint=setup.fingerprint,
        agent_id=env.agent_id,
        server_version=env.server_version,
        sandbox=SandboxInfo(mode="workspace", default_cwd="/workspace"),
        workspace_mount_defaults=["/workspace", "/workspace/agent"],
        mounted_resources=resources,
        confinement=confinement_view(runtime),
    )


DEFINITIONS = (
    ToolDefinition(
        name="environment_describe",
        title="Describe the environment",
        description="This server's environment: agent, mounts (virtual paths, access), confinement, setup "
        "fingerprints.",
        input_model=EnvironmentInput,
        output_model=EnvironmentOutput,
        handler=environment_describe,
        effects=("resource_read",),
        idempotent=True,
    ),
    *agent_setup.DEFINITIONS,
)
