"""The environment family's seam: the mounted resources, the confinement report, and the fingerprints that tell
whether two sessions ran under the same setup (environment_describe reports them; sessions, memory search, substrate
and sandbox use them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from managed_tools.stores.ids import canonical_json, sha256_hex
from managed_tools.stores.mounts import default_mounts
from managed_tools.tools.context import Runtime
from managed_tools.tools.models import WireModel


class MountedResource(WireModel):
    kind: str
    mount_path: str
    access: Literal["read_write", "read_only"]
    scope: str
    prompt: str


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


class ConfinementView(WireModel):
    mode: Literal["landlock", "argv-only"] = Field(
        description="landlock: the kernel confines every spawned program; argv-only: argument checks alone."
    )
    landlock_abi: int = Field(description="The kernel's Landlock ABI in use (0: none).")
    spawn: Literal["launcher", "preexec", "none"] = Field(
        description="How a program enters its confinement: launcher (a small compiled helper, the fast way), "
        "preexec (a step in the forked child: as confined, slower to start) or none (argv-only)."
    )
    shell_network: bool = Field(description="Whether shell_run and the persistent shell may open TCP connections.")
    read_only_hand: str
    writable_shell: str


def confinement_view(runtime: Runtime) -> ConfinementView:
    c = runtime.confinement
    kernel = c.mode == "landlock"
    return ConfinementView(
        mode=c.mode,
        landlock_abi=c.abi,
        spawn=c.spawn or "none",
        shell_network=c.shell_network,
        read_only_hand="bash programs and grep/glob read the mounts (vaults: names only) and system files; they "
        + ("write nowhere and open no network (kernel-enforced)." if kernel else "are limited by argument checks."),
        writable_shell="shell_run and the persistent shell "
        + ("write only the writable mounts and a private temp dir (kernel-enforced)." if kernel else
           "can change any file the server's user can; only the approval stands in the way."),
    )  # fmt: skip
