"""`environment_describe`, and the fingerprints that tell whether two sessions ran under the same setup."""

from __future__ import annotations

from typing import Literal

from stores.ids import canonical_json, sha256_hex
from stores.mounts import default_mounts
from tools.context import Runtime, ToolContext
from tools.definition import ToolDefinition
from tools.models import NoArguments, WireModel


class MountedResource(WireModel):
    kind: str
    mount_path: str
    access: Literal["read_write", "read_only"]
    scope: str
    prompt: str


class SandboxInfo(WireModel):
    mode: Literal["workspace"]
    default_cwd: str


class EnvironmentOutput(WireModel):
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


def mounted_resources(runtime: Runtime) -> list[MountedResource]:
    env = runtime.environment
    return [
        MountedResource(kind=m.kind, mount_path=m.mount_path, access=m.access, scope=m.scope, prompt=m.prompt)
        for m in default_mounts(env.workspace, env.data_dir, env.agent_id, env.vaults)
    ]


def resource_contract_fingerprint(runtime: Runtime) -> str:
    return sha256_hex(canonical_json([r.model_dump(mode="json") for r in mounted_resources(runtime)]))


def setup_fingerprint(runtime: Runtime) -> str:
    """Changes when the agent, the catalogue's policies or the mounts change; not when data changes."""
    tools = [[t.name, t.permission_policy, list(t.effects), t.read_only] for t in runtime.registry]
    return sha256_hex(
        canonical_json(
            {"agent": runtime.environment.agent_id, "tools": tools, "mounts": resource_contract_fingerprint(runtime)}
        )
    )


async def environment_describe(ctx: ToolContext, _: NoArguments) -> EnvironmentOutput:
    runtime = ctx.runtime
    env = runtime.environment
    resources = mounted_resources(runtime)
    identity = {"server": env.server_name, "agent": env.agent_id, "mounts": [r.mount_path for r in resources]}
    return EnvironmentOutput(
        id=f"local:{env.agent_id}",
        name=f"{env.server_name} (agent {env.agent_id})",
        kind="local",
        fingerprint=sha256_hex(canonical_json(identity)),
        resource_contract_fingerprint=resource_contract_fingerprint(runtime),
        agent_setup_fingerprint=setup_fingerprint(runtime),
        agent_id=env.agent_id,
        server_version=env.server_version,
        sandbox=SandboxInfo(mode="workspace", default_cwd="/workspace"),
        workspace_mount_defaults=["/workspace", "/workspace/agent"],
        mounted_resources=resources,
    )


DEFINITIONS = (
    ToolDefinition(
        name="environment_describe",
        title="Describe the environment",
        description="Describe this server's environment: agent, mounted resources (virtual paths and access) and "
        "setup fingerprints.",
        input_model=NoArguments,
        output_model=EnvironmentOutput,
        handler=environment_describe,
        effects=("resource_read",),
        idempotent=True,
    ),
)
