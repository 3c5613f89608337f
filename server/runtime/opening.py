"""Opening the process-wide runtime: the state database, the registry, the environment."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from managed_tools.sandbox import layers
from managed_tools.sandbox.confine import ConfinementError, open_confinement
from managed_tools.sandbox.grants import GrantError, Grants, toolchain_grants
from managed_tools.sandbox.mounts import Mount, default_mounts, substrate_dir
from managed_tools.sandbox.paths import PathGuard
from managed_tools.sandbox.ripgrep import rg_binary
from managed_tools.server import SERVER_NAME, __version__
from managed_tools.server.config.data_dir import LEGACY_DIR, skill_dirs, state_root, user_config_home
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.providers.provider import ConfiguredProvider
from managed_tools.server.runtime import leftovers
from managed_tools.server.runtime.extensions import ExtensionError, Extensions, load_extensions
from managed_tools.server.runtime.headless import ModelHeadless
from managed_tools.server.runtime.secrets import open_vault
from managed_tools.server.upstream.fleet import LISTING_WAIT_SECONDS, running_upstreams, upstream_entries
from managed_tools.server.upstream.remembered import upstream_cache
from managed_tools.server.upstream.secrets import SecretLookup
from managed_tools.stores import retention, sessions, substrate
from managed_tools.stores.attachments import directory
from managed_tools.stores.db import Database
from managed_tools.stores.errors import DatabaseOpenError, StoreError
from managed_tools.stores.skills import SkillDir, SkillFilter, SkillSet
from managed_tools.stores.vault_key import VaultKeyError
from managed_tools.tools.catalogue import build_registry, checked
from managed_tools.tools.discovery import tools as discovery
from managed_tools.tools.framework.calls import variables
from managed_tools.tools.framework.context.context import Environment, Runtime
from managed_tools.tools.framework.context.variable_sources import VariableSources
from managed_tools.tools.framework.definitions.custom import custom_tool
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.latent import latent_tool
from managed_tools.tools.framework.definitions.prompt_tools import prompt_tool
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.errors import RegistryError
from managed_tools.tools.shell import posture as shell_core
from managed_tools.tools.substrate import defaults


class StartupError(Exception):
    """The server cannot start as configured; the message tells the user what to change."""


def startup_extensions(config: ServeConfig) -> Extensions:
    """The extension modules the user named (`--tools-module`), loaded once."""
    try:
        return load_extensions(config.tool_modules)
    except ExtensionError as exc:
        raise StartupError(str(exc)) from exc


def served_registry(
    config: ServeConfig, extensions: Extensions, extra_tools: tuple[ToolDefinition, ...] = ()
) -> Registry:
    """The catalogue as this configuration serves it (config.json's custom tools, the extensions' tools, the
    policy), once the directories it mounts are checked: `serve` runs with it, `tools` prints it."""
    if not config.workspace.is_dir():
        raise StartupError(f"The workspace {config.workspace} is not a directory.")
    for name, path in config.vaults.items():
        if not path.is_dir():
            raise StartupError(f"The vault {name!r} ({path}) is not a directory.")
    return configured_registry(config, extensions, extra_tools)


def configured_registry(
    config: ServeConfig, extensions: Extensions, extra_tools: tuple[ToolDefinition, ...] = ()
) -> Registry:
    """The catalogue as configured, mounts unchecked: what the approval commands filter requests with."""
    try:
        declared = [
            *(custom_tool(spec) for spec in config.custom_tools),
            *(latent_tool(spec) for spec in config.latent_tools),
            *(prompt_tool(spec) for spec in config.prompt_tools),
        ]
        upstream = upstream_entries(config.policy, config.mcp_servers)  # checked when each upstream lists its tools
        policy = {tool: p for tool, p in config.policy.items() if tool not in upstream}
        theirs = upstream_entries(config.overrides, config.mcp_servers)
        overrides = {tool: o for tool, o in config.overrides.items() if tool not in theirs}
        registry = build_registry(
            (*declared, *extra_tools),
            policy,
            overrides=overrides,
            extensions=extensions.tools,
            selection=config.selection,
            upstreams=tuple(config.mcp_servers),
        )
        if config.tool_search:  # served whatever the selection: they reach only what it serves
            for definition in discovery.DEFINITIONS:
                registry.add(definition, toolset="search", checked=checked(definition))
    except RegistryError as exc:
        raise StartupError(str(exc)) from exc
    secrets = [name for name, kind in registry.variable_types().items() if kind == "secret"]
    for name in secrets:
        if isinstance(config.variables.get(name), str):
            raise StartupError(
                f"config.json gives the secret {name} as plain text; a secret never sits in the file. Use "
                f'{{"env": "VAR"}} to read it from the server\'s environment, or `managed-tools secret set {name}`.'
            )
    return registry


async def with_upstream_tools(config: ServeConfig, registry: Registry, secrets: SecretLookup | None = None) -> None:
    """Add to `registry` the tools each configured upstream lists when started once (what `tools` prints)."""
    if not config.mcp_servers:
        return
    mounts = default_mounts(config.workspace, config.data_dir, config.agent, config.vaults)
    try:
        confinement = open_confinement(
            mounts,
            data_dir=config.data_dir,
            network=config.shell_network,
            limits=config.sandbox.limits.limits(),
            allowed=config.sandbox.network,
        )
    except (ConfinementError, StoreError) as exc:
        raise StartupError(str(exc)) from exc
    try:
        specs, policy, overrides = config.mcp_servers, config.policy, config.overrides
        async with running_upstreams(specs, registry, policy=policy, overrides=overrides, confinement=confinement,
                                     mounts=mounts,
                                     workspace=config.workspace, secrets=secrets, wait_seconds=LISTING_WAIT_SECONDS,
                                     cache_dir=upstream_cache(config.data_dir)):  # fmt: skip
            pass
    finally:
        confinement.close()


def shell_grants(config: ServeConfig) -> Grants:
    """The writable shell's toolchain (config `sandbox.readPaths`/`writePaths`, the workspace venvs' interpreters),
    never reaching where the server keeps what no spawned program may read."""
    protected = {
        "the data dir": config.data_dir,
        "the state directory of every workspace": state_root(),
        "the user config directory (vault keys, config.json)": user_config_home(),
        **{f"the vault {name!r}": path for name, path in config.vaults.items()},
    }
    try:
        return toolchain_grants(
            config.workspace,
            read_paths=config.sandbox.read_paths,
            write_paths=config.sandbox.write_paths,
            protected=protected,
            server_path=os.environ.get("PATH", ""),
        )
    except GrantError as exc:
        raise StartupError(str(exc)) from exc


def skill_set(config: ServeConfig) -> SkillSet:
    """The skill directories (server/config/data_dir.py says which, in which order) and the configured filter."""
    substrate = substrate_dir(config.data_dir, config.agent)
    found = skill_dirs(config.workspace, substrate, config.skills.directories, config.skills_dirs)
    return SkillSet([SkillDir(*where) for where in found], SkillFilter(config.skills.enabled, config.skills.include))


def path_guard(config: ServeConfig, mounts: list[Mount]) -> PathGuard:
    """The one path guard over the mounts, the agent's substrate directory made first."""
    for mount in mounts:
        if mount.kind == "agent_substrate":
            mount.root.mkdir(parents=True, exist_ok=True)
    # A `.managed-tools` in the workspace is never read (server/config/data_dir.py); it stays out of the tools' reach
    # too.
    return PathGuard(
        mounts, private=[config.data_dir, config.workspace / LEGACY_DIR], attachments=directory(config.data_dir)
    )


def with_model(runtime: Runtime, config: ServeConfig, secrets: SecretLookup | None) -> Runtime:
    """The runtime with config.json's model, if one is configured (the catalogue's port, and the headless runs of
    due wakes); its key resolves through the same vault as the upstreams' `${vault:NAME}`."""
    if config.model is None:
        return runtime
    lookup = secrets or functools.partial(variables.resolve, runtime, secret=True)
    with_provider = dataclasses.replace(runtime, model_provider=ConfiguredProvider(config.model, lookup))
    return dataclasses.replace(with_provider, headless=ModelHeadless(with_provider))


async def _tidy(db: Database, guard: PathGuard, config: ServeConfig) -> None:
    """What a killed server left half done is swept first (it reads the unfinished calls' spans), then the spans
    the retention policy no longer keeps are compacted."""
    await leftovers.sweep(db, guard, config.data_dir)
    await retention.apply(db, config.retention.policy())


@asynccontextmanager
async def open_runtime(
    config: ServeConfig,
    extensions: Extensions | None = None,
    *,
    extra_tools: tuple[ToolDefinition, ...] = (),
    secrets: SecretLookup | None = None,
) -> AsyncIterator[Runtime]:
    """The runtime; `extensions` defaults to loading the configured modules (the server passes the ones it
    also publishes resources and prompts from). `secrets` resolves `${vault:NAME}` in the upstreams' env."""
    registry = served_registry(config, startup_extensions(config) if extensions is None else extensions, extra_tools)
    try:
        db = await Database.open(config.state, local_dir=config.data_dir, busy_timeout_ms=config.busy_timeout_ms)
    except DatabaseOpenError as exc:
        raise StartupError(str(exc)) from exc
    try:
        try:
            leftovers.mark_ours(config.data_dir)  # before healing, which sweeps a killed promotion's temporary file
        except (OSError, StoreError) as exc:
            raise StartupError(f"Cannot prepare the data dir {config.data_dir}: {exc}") from exc
        await substrate.heal_interrupted(db)
        if config.session is not None:
            async with db.read() as tx:
                try:
                    await sessions.get_agent_session(tx, config.session, config.agent, owner=sessions.LOCAL_OWNER)
                except StoreError as exc:
                    raise StartupError(
                        f"Cannot resume session {config.session}: {exc} Run without --session to start a new one."
                    ) from exc
        environment = Environment(
            agent_id=config.agent,
            workspace=config.workspace,
            data_dir=config.data_dir,
            server_name=SERVER_NAME,
            server_version=__version__,
            vaults=config.vaults,
        )
        mounts = default_mounts(config.workspace, config.data_dir, config.agent, config.vaults)
        guard = path_guard(config, mounts)
        await _tidy(db, guard, config)
        try:
            confinement = open_confinement(
                mounts,
                data_dir=config.data_dir,
                network=config.shell_network,
                binaries=[rg_binary()],
                limits=config.sandbox.limits.limits(),
                grants=shell_grants(config),
                allowed=config.sandbox.network,
            )
        except (ConfinementError, StoreError) as exc:
            raise StartupError(str(exc)) from exc
        try:
            lacking = layers.missing(layers.describe(confinement))
            if config.require_confinement and lacking:
                raise StartupError(
                    "--require-confinement: this system cannot hold every sandbox layer; missing: "
                    + "; ".join(f"{layer.name} ({layer.detail})" for layer in lacking)
                    + ". Refusing to start."
                )
            skills = await anyio.to_thread.run_sync(skill_set, config)
            try:
                sources = VariableSources(vault=open_vault(config), config=config.variables)
            except VaultKeyError as exc:
                raise StartupError(exc.detail) from exc
            runtime = with_model(
                Runtime(
                    environment=environment,
                    db=db,
                    registry=registry,
                    guard=guard,
                    confinement=confinement,
                    skills=skills,
                    variables=sources,
                    auto_sandboxed=config.auto_sandboxed,
                    budgets=config.budgets,
                    pending_caps=config.pending_approvals,
                    tool_search=config.tool_search,
                    result_format=config.result_format,
                    secret_scanning=config.secret_scanning,
                ),
                config,
                secrets,
            )
            if config.substrate_defaults:
                await defaults.write_defaults(runtime)
            try:
                async with (
                    running_upstreams(
                        config.mcp_servers,
                        registry,
                        policy=config.policy,
                        overrides=config.overrides,
                        confinement=confinement,
                        mounts=mounts,
                        workspace=config.workspace,
                        secrets=secrets or functools.partial(variables.resolve, runtime, secret=True),
                        cache_dir=upstream_cache(config.data_dir),
                    ),
                    retention.applied_while_running(db, config.retention.policy()),
                ):
                    yield runtime
            finally:
                await shell_core.close_all(runtime)  # no shell or command outlives the server
        finally:
            confinement.close()  # the private HOME/TMPDIR goes with the runtime
    finally:
        await db.close()
