"""The user's configuration of one server process. Only the user sets it; no tool can read or change it.

Three sources: command-line flags, an optional `config.json` in the data dir (outside every mount, so no tool can
reach it; see server/config/data_dir.py) and the user-wide `config.json` under it (server/config/config_files.py). Flags
win over the files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretBytes, ValidationError, field_validator
from pydantic_core import ErrorDetails

from managed_tools.server.config.config_files import (
    CONFIG_FILE,
    ConfigFiles,
    read_config_files,
    refuse_reachable,
)
from managed_tools.server.config.data_dir import (
    BUSY_TIMEOUT_MS,
    STATE_FILE,
    ConfigError,
    legacy_notice,
    locate_data_dir,
    refuse_overlap,
    tell,
    workspace_root,
)
from managed_tools.server.config.provider_spec import ModelProviderSpec, chosen
from managed_tools.server.config.request_state_keys import KeyRingError, load_key_ring, load_vault_key
from managed_tools.server.config.state_place import DATABASE_RULE, StatePlace
from managed_tools.server.config.upstream_spec import UpstreamSpecs
from managed_tools.server.config.user_config import (
    DEFAULT_APPROVAL_WAIT_SECONDS,
    AgentName,
    Approvals,
    ApprovalWait,
    OAuthConfig,
    Policy,
    QuotasConfig,
    RetentionConfig,
    SandboxConfig,
    SkillsConfig,
    TelemetryConfig,
    UserConfig,
    VariableName,
    VaultName,
)
from managed_tools.stores.approvals import PendingCaps
from managed_tools.stores.db import is_database_url
from managed_tools.tools.framework.context.budget import Budgets
from managed_tools.tools.framework.context.variable_sources import ConfigValue
from managed_tools.tools.framework.definitions.custom import CustomToolSpec
from managed_tools.tools.framework.definitions.latent import LatentToolSpec
from managed_tools.tools.framework.definitions.names import did_you_mean
from managed_tools.tools.framework.definitions.overrides import ToolOverride
from managed_tools.tools.framework.definitions.prompt_tools import PromptToolSpec
from managed_tools.tools.framework.definitions.toolsets import PRESETS, ToolSelection
from managed_tools.tools.framework.wire.compact import ResultFormat
from managed_tools.tools.framework.wire.secret_scan import SecretScanning

# Defined in the light modules (the approval commands load them alone), still imported from here by many.
__all__ = ["CONFIG_FILE", "STATE_FILE", "ConfigError"]


def load_user_config(files: ConfigFiles) -> UserConfig:
    """The merged config files, validated; an error names the file, the key and, for an unknown key, a near one."""
    try:
        return UserConfig.model_validate(files.merged)
    except ValidationError as exc:
        # A mistyped key first: the field it was meant for is then missing too, which says less.
        first = min(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
        location = tuple(first["loc"])
        where = ".".join(str(p) for p in location) or "the top level"
        raise ConfigError(f"{files.source(location)} is invalid at {where}: {_why(first)}") from exc


def _why(error: ErrorDetails) -> str:
    """Pydantic's message, or for a mistyped key (`comand`) the key and the nearest one the entry takes."""
    location, given = tuple(error["loc"]), error["input"]
    if error["type"] == "extra_forbidden" and location:
        unknown, known = [str(location[-1])], _keys_at(location[:-1])
    elif isinstance(given, dict) and (known := _keys_at(location)):
        unknown = [str(key) for key in given if key not in known]
    else:
        unknown = []
    if not unknown:
        return error["msg"]
    named = "; ".join(f"unknown key {key!r}{did_you_mean(key, known)}" for key in unknown)
    return named if error["type"] == "extra_forbidden" else f"{named} ({error['msg']})"


def _keys_at(location: tuple[str | int, ...]) -> list[str]:
    """The keys config.json takes at `location` (from UserConfig's JSON schema; a union's branches together)."""
    schema = UserConfig.model_json_schema()
    definitions = schema.get("$defs", {})

    def expanded(node: dict[str, Any]) -> list[dict[str, Any]]:
        if "$ref" in node:
            return expanded(definitions[node["$ref"].rsplit("/", 1)[-1]])
        branches = [b for key in ("anyOf", "oneOf", "allOf") for b in node.get(key, [])]
        return [node] if not branches else [leaf for branch in branches for leaf in expanded(branch)]

    here = expanded(schema)
    for part in location:
        deeper = [
            child
            for node in here
            for child in (
                [node["properties"][part]] if part in node.get("properties", {})
                else [node["items"]] if isinstance(part, int) and isinstance(node.get("items"), dict)
                else [node["additionalProperties"]] if isinstance(node.get("additionalProperties"), dict)
                else list(node.get("patternProperties", {}).values())
            )
        ]  # fmt: skip
        here = [leaf for child in deeper for leaf in expanded(child)] if deeper else here  # a union's tag: stay
    return list(dict.fromkeys(key for node in here for key in node.get("properties", {})))


class ServeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace: Path
    data_dir: Path
    agent: AgentName = "default"
    session: str | None = None
    busy_timeout_ms: Annotated[int, Field(ge=0)] = BUSY_TIMEOUT_MS
    policy: dict[str, Policy] = Field(default_factory=dict)
    overrides: dict[str, ToolOverride] = Field(default_factory=dict)  # config.json `overrides`
    approval_wait_seconds: ApprovalWait = DEFAULT_APPROVAL_WAIT_SECONDS
    custom_tools: tuple[CustomToolSpec, ...] = ()
    latent_tools: tuple[LatentToolSpec, ...] = ()
    prompt_tools: tuple[
        PromptToolSpec, ...
    ] = ()  # config.json `promptTools` (tools/framework/definitions/prompt_tools.py)
    tool_modules: tuple[str, ...] = ()
    vaults: dict[VaultName, Path] = Field(default_factory=dict)
    shell_network: bool = True  # TCP for the writable shell (`--shell-network`); the read-only hand never has it
    require_confinement: bool = False  # refuse to start without kernel confinement (`--require-confinement`)
    # config.json `sandbox` (the workspace's file replaces the user-wide one's whole; both outside every mount).
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    skills_dirs: tuple[Path, ...] = ()  # `--skills-dir`, searched after the others (so they win by name)
    oauth: OAuthConfig | None = None  # config.json's; the `--oauth-*` flags amend it into HttpConfig.oauth
    approvals: Approvals = "form"  # config.json `approvals`: "page" asks permission only on the loopback page
    variables: dict[VariableName, ConfigValue] = Field(default_factory=dict)
    mcp_servers: UpstreamSpecs = Field(default_factory=dict)  # upstream MCP servers (server/upstream/)
    selection: ToolSelection = ToolSelection()  # the tools served
    database: str | None = None  # `--database postgresql://...`; None: SQLite at state_path
    request_state_keys: tuple[SecretBytes, ...] = ()  # the shared ring; () seals under a key of this process
    vault_key: SecretBytes | None = None  # the replicas' shared vault key; None: the data dir's own
    auto_sandboxed: bool = False  # `--auto-sandboxed`, config `autoSandboxed`
    retention: RetentionConfig = Field(default_factory=RetentionConfig)  # config `retention`
    substrate_defaults: bool = True  # config `substrateDefaults`
    budgets: Budgets = Field(default_factory=Budgets)  # config `budgets`
    tool_search: bool = False  # `--tool-search`, config `toolSearch`
    result_format: ResultFormat = "json"  # `--result-format`, config `resultFormat`
    secret_scanning: SecretScanning = SecretScanning()  # config `secretScanning`
    model: ModelProviderSpec | None = None  # config.json `models`' entry that runs (server/config/provider_spec.py)
    telemetry: TelemetryConfig = TelemetryConfig()  # config.json `telemetry` (server/runtime/otel.py)
    quotas: QuotasConfig = QuotasConfig()  # config.json `quotas`: each principal's calls over HTTP
    pending_approvals: PendingCaps = PendingCaps()  # config.json `pendingApprovals` (stores/approvals.py)

    @field_validator("database")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is not None and not is_database_url(value):
            raise ConfigError(DATABASE_RULE)
        return value

    @classmethod
    def build(
        cls,
        *,
        workspace: Path | None,
        data_dir: Path | None,
        agent: str = "default",
        session: str | None = None,
        allow: tuple[str, ...] = (),
        ask: tuple[str, ...] = (),
        approval_wait_seconds: float | None = None,
        tool_modules: tuple[str, ...] = (),
        vaults: dict[str, Path] | None = None,
        skills_dirs: tuple[Path, ...] = (),
        selection: Selecting | None = None,
        database: str | None = None,
        auto_sandboxed: bool | None = None,
        tool_search: bool | None = None,
        result_format: ResultFormat | None = None,
        notify: Callable[[str], None] = tell,
    ) -> ServeConfig:
        """Resolve the defaults (the current directory, a data dir per workspace in the user's state directory),
        refuse a data dir that overlaps a mount, say that an old `<workspace>/.managed-tools` is ignored (never read),
        merge the config files (the user's, then the workspace's)."""
        root = workspace_root(workspace)
        data = locate_data_dir(root, data_dir)
        if (ignored := legacy_notice(root)) is not None:  # never read: a workspace is anyone's input
            notify(ignored)
        user = load_user_config(read_config_files(data, {"the workspace": root}))
        policy = dict(user.policy)
        policy.update(dict.fromkeys(allow, "always_allow"))
        policy.update(dict.fromkeys(ask, "always_ask"))
        vault_roots = {name: path.expanduser().resolve() for name, path in {**user.vaults, **(vaults or {})}.items()}
        in_vaults = {f"the vault {name!r}": path for name, path in vault_roots.items()}
        refuse_overlap(data, in_vaults)
        refuse_reachable(in_vaults)
        try:
            mounts = [root, *vault_roots.values()]
            keys = load_key_ring(user.request_state_keys, os.environ, data_dir=data, mounts=mounts)
            vault_key = load_vault_key(user.vault_key, os.environ, data_dir=data, mounts=mounts)
        except KeyRingError as exc:
            raise ConfigError(str(exc)) from None
        return cls(
            workspace=root,
            data_dir=data,
            agent=agent,
            session=session,
            policy=policy,
            overrides=user.overrides,
            approval_wait_seconds=user.approval_wait_seconds
            if approval_wait_seconds is None
            else approval_wait_seconds,
            custom_tools=tuple(user.custom_tools),
            latent_tools=tuple(user.latent_tools),
            prompt_tools=tuple(user.prompt_tools),
            tool_modules=tool_modules,
            vaults=vault_roots,
            skills=_skills(user.skills, data),
            skills_dirs=_skill_dirs(data, tuple(p.expanduser().resolve() for p in skills_dirs)),
            oauth=user.oauth,
            approvals=user.approvals,
            variables=user.variables,
            mcp_servers=user.mcp_servers,
            selection=_selection(user, selection or Selecting()),
            database=database,
            request_state_keys=keys,
            vault_key=vault_key,
            sandbox=user.sandbox,
            auto_sandboxed=bool(auto_sandboxed or user.auto_sandboxed),
            retention=user.retention,
            substrate_defaults=user.substrate_defaults,
            budgets=user.budgets,
            tool_search=_tool_search(tool_search, user, selection or Selecting()),
            result_format=result_format or user.result_format,
            secret_scanning=user.secret_scanning,
            model=chosen(user.models),
            quotas=user.quotas,
            pending_approvals=user.pending_approvals,
            telemetry=user.telemetry,
        )

    @property
    def place(self) -> StatePlace:
        """Where the state is, as the approval commands know it without the rest."""
        return StatePlace(self.workspace, self.data_dir, self.database, self.busy_timeout_ms)

    @property
    def state_path(self) -> Path:
        return self.place.state_path

    @property
    def state(self) -> Path | str:
        """Where the state is: the SQLite file, or the PostgreSQL URL."""
        return self.place.state


class Selecting(BaseModel):
    """The tool selection flags as given; None where a flag was not given (config.json's key applies)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    preset: str | None = None
    toolsets: tuple[str, ...] | None = None
    tools: tuple[str, ...] | None = None
    exclude_tools: tuple[str, ...] | None = None
    read_only: bool | None = None


def _selection(file: UserConfig, flags: Selecting) -> ToolSelection:
    """Each flag given overrides its config.json key, key by key."""

    def either(flag: tuple[str, ...] | None, key: list[str] | None) -> tuple[str, ...] | None:
        return flag if flag is not None else None if key is None else tuple(key)

    return ToolSelection(
        preset=flags.preset if flags.preset is not None else file.preset,
        toolsets=either(flags.toolsets, file.toolsets),
        tools=either(flags.tools, file.tools) or (),
        exclude_tools=either(flags.exclude_tools, file.exclude_tools) or (),
        read_only=bool(flags.read_only if flags.read_only is not None else file.read_only),
    )


def _tool_search(flag: bool | None, file: UserConfig, flags: Selecting) -> bool:
    """`--tool-search`/`--no-tool-search`, else config.json's `toolSearch`, else what the preset chose."""
    if flag is not None:
        return flag
    if file.tool_search is not None:
        return file.tool_search
    preset = flags.preset if flags.preset is not None else file.preset
    return preset in PRESETS and PRESETS[preset].tool_search


def _skills(file: SkillsConfig, data: Path) -> SkillsConfig:
    """config.json's skill directories resolved, relative ones against the data dir."""
    if file.directories is None:
        return file
    found = tuple((data / p.expanduser()).resolve() for p in file.directories)  # an absolute path stays itself
    return file.model_copy(update={"directories": _skill_dirs(data, found)})


def _skill_dirs(data: Path, found: tuple[Path, ...]) -> tuple[Path, ...]:
    """Skill directories never overlap the data dir, where the database lives."""
    refuse_overlap(data, {f"the skills directory {p}": p for p in found})
    return found
