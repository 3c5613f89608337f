"""The environment family's seam: the mounted resources, the confinement report, and the agent setup contract
whose fingerprints tell whether two sessions ran under the same setup (recorded for each wake at attach;
environment_describe and agent_describe_setup report it; sessions, memory search, substrate and sandbox use it)."""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar
from weakref import WeakKeyDictionary

from pydantic import Field, ValidationError

from managed_tools.sandbox.confine import Confinement
from managed_tools.sandbox.layers import describe
from managed_tools.sandbox.mounts import default_mounts
from managed_tools.stores import sessions, setups
from managed_tools.stores.ids import canonical_json, sha256_hex
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.models import WireModel
from managed_tools.tools.framework.wire.sections import Partial


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


def setup_fingerprint(runtime: Runtime) -> str:
    """Changes when the catalogue, its policies, the mounts, the vaults or the server change; not when data does."""
    return agent_setup(runtime).fingerprint


# ---- the agent setup contract ------------------------------------------------------------------------

# The reference's sections, less system_prompt (an MCP server sends fixed instructions per version, so the
# environment section's serverVersion stands for them), plus policy (the user's per-tool overrides).
SectionName = Literal["tools", "policy", "skills", "environment", "resource_contract", "vaults"]
SECTIONS: tuple[SectionName, ...] = ("tools", "policy", "skills", "environment", "resource_contract", "vaults")


class ToolEntry(WireModel):
    name: str
    ownership: str
    effects: list[str]
    read_only: bool
    destructive: bool
    interrupt_behavior: str
    fingerprint: str = Field(description="sha256 of the title, description and both schemas.")
    model_visible_chars: int = Field(
        description="Characters a client puts before the model for this tool: name, description, input schema."
    )


class ToolsSection(WireModel):
    fingerprint: str
    count: int
    model_visible_chars: int
    tools: list[ToolEntry]


class PolicySection(WireModel):
    fingerprint: str
    always_ask: list[str] = Field(description="Tools that wait for a person's approval; every other tool is allowed.")
    asks_for_some_arguments: list[str] = Field(description="Allowed tools that ask for some arguments.")


class SkillEntry(WireModel):
    name: str
    source: str
    sha256: str


class SkillsSection(WireModel):
    fingerprint: str
    count: int
    skills: list[SkillEntry] = Field(description="The skills served (skills_list), each with its file's sha256.")


class EnvironmentSection(WireModel):
    fingerprint: str
    agent_id: str
    server_name: str
    server_version: str
    sandbox_mode: Literal["workspace"]
    confinement: Literal["landlock", "argv-only"]
    shell_network: bool


class ResourceContractSection(WireModel):
    fingerprint: str
    mounted_resources: list[MountedResource]


class VaultView(WireModel):
    vault_name: str
    mount_path: str
    access: Literal["read_write", "read_only"]
    scope: str
    prompt: str


class VaultsSection(WireModel):
    fingerprint: str
    count: int
    vaults: list[VaultView]


class AgentSetup(Partial):
    """What a session ran under: each section carries its own fingerprint, `fingerprint` covers them all.
    agent_describe_setup may show only some sections (`only`)."""

    ALWAYS = frozenset({"fingerprint"})

    fingerprint: str
    tools: ToolsSection
    policy: PolicySection
    skills: SkillsSection
    environment: EnvironmentSection
    resource_contract: ResourceContractSection
    vaults: VaultsSection

    def section_fingerprints(self) -> dict[SectionName, str]:
        return {name: getattr(self, name).fingerprint for name in SECTIONS}


S = TypeVar("S", bound=WireModel)


def _sealed(model: type[S], **fields: Any) -> S:
    """The section with its fingerprint: sha256 of its canonical JSON without the fingerprint."""
    body = model.model_validate({"fingerprint": "", **fields})
    digest = sha256_hex(canonical_json(body.model_dump(mode="json", exclude={"fingerprint"})))
    return body.model_copy(update={"fingerprint": digest})


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# The catalogue part depends on the registry alone, and building every schema takes ~0.1 s: once per registry.
_CATALOGUES: WeakKeyDictionary[Registry, tuple[tuple[str, ...], ToolsSection, PolicySection]] = WeakKeyDictionary()


def _catalogue(registry: Registry) -> tuple[ToolsSection, PolicySection]:
    names = tuple(registry.names())
    cached = _CATALOGUES.get(registry)
    if cached is not None and cached[0] == names:
        return cached[1], cached[2]
    entries = []
    for d in registry:
        visible = _compact({"name": d.name, "description": d.description, "inputSchema": d.input_schema()})
        published = [d.title, d.description, d.input_schema(), d.output_schema()]
        entries.append(
            ToolEntry(
                name=d.name,
                ownership=d.ownership,
                effects=list(d.effects),
                read_only=d.read_only,
                destructive=d.destructive,
                interrupt_behavior=d.interrupt_behavior,
                fingerprint=sha256_hex(canonical_json(published)),
                model_visible_chars=len(visible),
            )
        )
    tools = _sealed(
        ToolsSection, count=len(entries), model_visible_chars=sum(e.model_visible_chars for e in entries),
        tools=entries,
    )  # fmt: skip
    policy = _sealed(
        PolicySection,
        always_ask=[d.name for d in registry if d.permission_policy == "always_ask"],
        asks_for_some_arguments=[
            d.name for d in registry if d.permission_policy == "always_allow" and d.asks_for_some_arguments
        ],
    )
    _CATALOGUES[registry] = (names, tools, policy)
    return tools, policy


def vaults(runtime: Runtime) -> list[VaultView]:
    return [
        VaultView(
            vault_name=r.mount_path.removeprefix("/vaults/"),
            mount_path=r.mount_path,
            access=r.access,
            scope=r.scope,
            prompt=r.prompt,
        )
        for r in mounted_resources(runtime)
        if r.kind == "vault"
    ]


# The live contract of a runtime and its recorded form, kept with what it was built for: the environment, the
# confinement, and the skill set's version (it changes when a skill file does).
_LIVE: WeakKeyDictionary[Registry, tuple[tuple[object, object, object, int], AgentSetup, str]] = WeakKeyDictionary()


def _live(runtime: Runtime) -> tuple[AgentSetup, str]:
    key = (runtime.environment, runtime.confinement, runtime.skills, runtime.skills.version)
    cached = _LIVE.get(runtime.registry)
    if cached is not None and all(a is b or a == b for a, b in zip(cached[0], key, strict=True)):
        return cached[1], cached[2]
    setup = _build(runtime)
    _LIVE[runtime.registry] = (key, setup, setup.model_dump_json())
    return setup, _LIVE[runtime.registry][2]


def agent_setup(runtime: Runtime) -> AgentSetup:
    """The live setup contract of this server process (what attach records for each wake)."""
    return _live(runtime)[0]


def live_setup(runtime: Runtime) -> tuple[AgentSetup, str]:
    """The live contract and the form attach stores (JSON, serialised once per setup), of one and the same
    skill set."""
    return _live(runtime)


def _build(runtime: Runtime) -> AgentSetup:
    env = runtime.environment
    tools, policy = _catalogue(runtime.registry)
    listed = vaults(runtime)
    served = [SkillEntry(name=s.name, source=s.source, sha256=s.sha256) for s in runtime.skills.all()]
    sections: dict[str, Any] = {
        "tools": tools,
        "policy": policy,
        "skills": _sealed(SkillsSection, count=len(served), skills=served),
        "environment": _sealed(
            EnvironmentSection,
            agent_id=env.agent_id,
            server_name=env.server_name,
            server_version=env.server_version,
            sandbox_mode="workspace",
            confinement=runtime.confinement.mode,
            shell_network=runtime.confinement.shell_network,
        ),
        "resource_contract": _sealed(ResourceContractSection, mounted_resources=mounted_resources(runtime)),
        "vaults": _sealed(VaultsSection, count=len(listed), vaults=listed),
    }
    overall = sha256_hex(canonical_json({name: sections[name].fingerprint for name in SECTIONS}))
    return AgentSetup(fingerprint=overall, **sections)


class NetworkView(WireModel):
    mode: Literal["off", "proxied", "direct"] = Field(
        description="off: no network; proxied: commands run in a network namespace of their own and reach only "
        "the allowed domains, over HTTP(S) through the egress proxy (HTTP_PROXY is set for them); direct: TCP "
        "as the host has it, unfiltered (`reason` says why)."
    )
    allowed_domains: list[str] = Field(
        description="config sandbox.network.allowedDomains: names and *.wildcards (subdomains only) the proxy "
        "connects to; loopback and link-local addresses never, private ones only for a name listed exactly."
    )
    reason: str | None = None


class LayerView(WireModel):
    name: str
    in_force: bool
    blocks: str
    detail: str


class ConfinementView(WireModel):
    mode: Literal["landlock", "argv-only"] = Field(
        description="landlock: the kernel confines every spawned program; argv-only: argument checks alone."
    )
    landlock_abi: int = Field(description="The kernel's Landlock ABI in use (0: none).")
    spawn: Literal["launcher", "preexec", "none"] = Field(
        description="How a program enters its confinement: launcher (a small compiled helper, the fast way), "
        "preexec (a step in the forked child: as confined, slower to start) or none (argv-only)."
    )
    shell_network: bool = Field(description="Whether shell_run and the persistent shell have network (see `network`).")
    network: NetworkView = Field(description="What shell commands and stdio upstream servers reach of the network.")
    read_only_hand: str
    writable_shell: str
    layers: list[LayerView] = Field(
        description="The sandbox's layers: what each blocks, whether it is in force here, and if not why."
    )


def network_view(c: Confinement) -> NetworkView:
    if not c.shell_network:
        return NetworkView(mode="off", allowed_domains=[])
    if c.egress is None:
        return NetworkView(mode="direct", allowed_domains=[], reason=c.egress_reason or f"confinement is {c.mode}")
    return NetworkView(mode="proxied", allowed_domains=list(c.egress.allowed))


def confinement_view(runtime: Runtime) -> ConfinementView:
    c = runtime.confinement
    kernel = c.mode == "landlock"
    return ConfinementView(
        mode=c.mode,
        landlock_abi=c.abi,
        spawn=c.spawn or "none",
        shell_network=c.shell_network,
        network=network_view(c),
        read_only_hand="bash programs and grep/glob read the mounts (vaults: names only) and system files; they "
        + ("write nowhere and open no network (kernel-enforced)." if kernel else "are limited by argument checks."),
        layers=[LayerView(name=x.name, in_force=x.in_force, blocks=x.blocks, detail=x.detail) for x in describe(c)],
        writable_shell="shell_run and the persistent shell "
        + ("write only the writable mounts and a private temp dir (kernel-enforced)." if kernel else
           "can change any file the server's user can; only the approval stands in the way."),
    )  # fmt: skip


class Recorded(WireModel):
    """The setup a session was last seen under: its wake (the current one for the current session), that wake's
    fingerprint, and the contract if it was recorded (else why not)."""

    wake_id: str | None
    fingerprint: str | None
    recorded_at: str | None
    setup: AgentSetup | None
    reason: str | None


# Recorded contracts never change (a row per agent and fingerprint), so a parsed one can be kept.
_PARSED: dict[tuple[str, str], AgentSetup] = {}
MAX_PARSED = 64


def _parsed(agent_id: str, found: setups.RecordedSetup) -> AgentSetup:
    key = (agent_id, found.fingerprint)
    if key not in _PARSED:
        if len(_PARSED) >= MAX_PARSED:
            _PARSED.clear()
        _PARSED[key] = AgentSetup.model_validate_json(found.contract)
    return _PARSED[key]


async def recorded_setup(ctx: ToolContext, session_id: str) -> Recorded:
    """`session_id` must already be scoped to this agent."""
    if session_id == ctx.session_id:
        wake_id: str | None = ctx.wake_id
    else:
        latest = await sessions.latest_wake(ctx.tx, session_id)
        wake_id = None if latest is None else latest.id
    if wake_id is None:
        reason = "The session has never been connected, so no setup was recorded for it."
        return Recorded(wake_id=None, fingerprint=None, recorded_at=None, setup=None, reason=reason)
    fingerprint, found = await setups.wake_setup(ctx.tx, ctx.agent_id, wake_id)
    known = Recorded(wake_id=wake_id, fingerprint=fingerprint, recorded_at=None, setup=None, reason=None)
    if found is None:
        why = "The session's latest wake predates recorded setup contracts; only its fingerprint is known."
        return known.model_copy(update={"reason": why})
    try:
        setup = _parsed(ctx.agent_id, found)
    except ValidationError:
        why = "The setup was recorded by a server version whose contract this one cannot read."
        return known.model_copy(update={"recorded_at": found.recorded_at, "reason": why})
    return known.model_copy(update={"recorded_at": found.recorded_at, "setup": setup})
