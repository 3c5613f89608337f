"""The user's configuration of one server process. Only the user sets it; no tool can read or change it.

Three sources: command-line flags, an optional `config.json` in the data dir (outside every mount, so no tool can
reach it; see server/data_dir.py) and the user-wide `config.json` under it (server/config_files.py). Flags win over
the files.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretBytes,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic_core import ErrorDetails

from managed_tools.sandbox.egress import NetworkConfig
from managed_tools.sandbox.policy import Limits
from managed_tools.server.config_files import (
    CONFIG_FILE,
    ConfigFiles,
    did_you_mean,
    read_config_files,
    refuse_reachable,
)
from managed_tools.server.data_dir import (
    BUSY_TIMEOUT_MS,
    STATE_FILE,
    ConfigError,
    legacy_notice,
    locate_data_dir,
    refuse_overlap,
    tell,
    workspace_root,
)
from managed_tools.server.http_allowlist import Address, host_entry, origin_entry
from managed_tools.server.http_token import TOKEN_PATTERN, TokenFileError, kept_token
from managed_tools.server.providers.spec import DEFAULT_MODEL, ModelProviderSpec, chosen
from managed_tools.server.request_state_keys import KeyRingError, KeyRingSource, load_key_ring, load_vault_key
from managed_tools.server.rules import APPROVAL_WAIT_RULE, NAME, TOKEN_ENV, approval_wait_allowed
from managed_tools.server.served_urls import ServedUrl, is_loopback
from managed_tools.server.state_place import DATABASE_RULE, StatePlace
from managed_tools.server.upstream.spec import UpstreamSpecs
from managed_tools.stores.db import is_database_url
from managed_tools.stores.retention import Retention
from managed_tools.tools.framework.budget import Budgets
from managed_tools.tools.framework.compact import ResultFormat
from managed_tools.tools.framework.custom import CustomToolSpec
from managed_tools.tools.framework.latent import LatentToolSpec
from managed_tools.tools.framework.overrides import ToolOverride
from managed_tools.tools.framework.prompt_tools import PromptToolSpec
from managed_tools.tools.framework.secret_scan import SecretScanning
from managed_tools.tools.framework.toolsets import PRESETS, ToolSelection
from managed_tools.tools.framework.variable_sources import ENV_NAME, ConfigValue

AgentName = Annotated[str, Field(pattern=f"^{NAME.pattern}$")]
VaultName = Annotated[str, Field(pattern=f"^{NAME.pattern}$")]
VariableName = Annotated[str, Field(pattern=ENV_NAME)]


def _approval_wait(seconds: float) -> float:
    if not approval_wait_allowed(seconds):
        raise ValueError(f"the approval wait takes {APPROVAL_WAIT_RULE}")
    return seconds


ApprovalWait = Annotated[float, AfterValidator(_approval_wait)]
Policy = Literal["always_allow", "always_ask"]
Approvals = Literal["form", "page"]
DEFAULT_APPROVAL_WAIT_SECONDS = 120.0
# Defined in the light modules (the approval commands load them alone), still imported from here by many.
__all__ = ["CONFIG_FILE", "STATE_FILE", "ConfigError"]


class SkillsConfig(BaseModel):
    """config.json `skills` (reference §8): `directories` replace the default ones, `include` is a name allowlist."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    include: tuple[str, ...] | None = None
    directories: tuple[Path, ...] | None = None


SCOPE_TOKEN = r"^[\x21\x23-\x5b\x5d-\x7e]{1,128}$"  # RFC 6749 scope-token characters


class OAuthConfig(BaseModel):
    """config.json `oauth` (or the `--oauth-*` flags): this server as an OAuth 2.1 resource server (server/oauth.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    issuer: ServedUrl = Field(description="The authorization server's issuer identifier, exactly as in its tokens.")
    resource: ServedUrl = Field(description="This server's canonical URL (the tokens' audience), e.g. .../mcp.")
    jwks_url: ServedUrl | None = Field(default=None, alias="jwksUrl", description="Else from the issuer's metadata.")
    required_scopes: tuple[Annotated[str, Field(pattern=SCOPE_TOKEN)], ...] = Field(default=(), alias="requiredScopes")
    leeway_seconds: Annotated[float, Field(ge=0, le=300)] = Field(default=30.0, alias="leewaySeconds")


class LimitsConfig(BaseModel):
    """config.json `sandbox.limits`: what one command, shell or upstream may use (0: no limit). Defaults a test
    suite fits in; a program stopped by one hears which (docs/sandbox.md)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    processes: Annotated[int, Field(ge=0, le=1_000_000)] = Limits.processes
    memory_mb: Annotated[int, Field(ge=0, le=1 << 30)] = Field(default=Limits.memory_mb, alias="memoryMB")
    file_size_mb: Annotated[int, Field(ge=0, le=1 << 30)] = Field(default=Limits.file_size_mb, alias="fileSizeMB")
    cpu_seconds: Annotated[int, Field(ge=0, le=1 << 30)] = Field(default=Limits.cpu_seconds, alias="cpuSeconds")

    def limits(self) -> Limits:
        return Limits(self.processes, self.memory_mb, self.file_size_mb, self.cpu_seconds)


class SandboxConfig(BaseModel):
    """config.json `sandbox`: the sandbox every spawned program runs in (sandbox/), and what the writable shell
    may reach beyond its mounts (sandbox/grants.py)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    read_paths: tuple[Path, ...] = Field(default=(), alias="readPaths", description="Read and execute (nvm, pyenv).")
    write_paths: tuple[Path, ...] = Field(default=(), alias="writePaths", description="Also write (caches).")
    network: NetworkConfig = Field(default_factory=NetworkConfig)  # the egress allowlist (sandbox/egress.py)


class RetentionConfig(BaseModel):
    """config.json `retention`: how long tool spans are kept before their wake is compacted into its trace summary
    (stores/retention.py, docs/retention.md). Unset: kept for good."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    events_max_age_days: Annotated[int, Field(ge=1, le=100_000)] | None = Field(default=None, alias="eventsMaxAgeDays")
    events_max_per_session: Annotated[int, Field(ge=10, le=100_000_000)] | None = Field(
        default=None, alias="eventsMaxPerSession"
    )

    def policy(self) -> Retention:
        return Retention(self.events_max_age_days, self.events_max_per_session)


class Quota(BaseModel):
    """What one principal may use of an HTTP server at a time (None: no bound); past it, 429 and Retry-After."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    calls_per_minute: Annotated[int, Field(gt=0)] | None = Field(default=None, alias="callsPerMinute")
    concurrent_calls: Annotated[int, Field(gt=0)] | None = Field(default=None, alias="concurrentCalls")
    pending_approvals: Annotated[int, Field(gt=0)] | None = Field(default=None, alias="pendingApprovals")

    @property
    def bounded(self) -> bool:
        return any(v is not None for v in (self.calls_per_minute, self.concurrent_calls, self.pending_approvals))


OAUTH_QUOTA = Quota(calls_per_minute=600, concurrent_calls=16, pending_approvals=20)


class QuotasConfig(BaseModel):
    """config.json `quotas` (server/http_quotas.py): each OAuth principal's (bounded by default, a team shares the
    server) and the one local principal's (the static token or none: the operator's own, unbounded by default)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    oauth: Quota = OAUTH_QUOTA
    token: Quota = Quota()


class TelemetryConfig(BaseModel):
    """config.json `telemetry` (server/otel.py): traces and metrics over OTLP/HTTP to `otlpEndpoint` (the collector's
    base URL), and `/metrics` for Prometheus on HTTP. The standard OTEL_* environment turns them on as well."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    otlp_endpoint: Annotated[str, Field(pattern=r"^https?://[^\s/]+(/\S*)?$")] | None = Field(
        default=None, alias="otlpEndpoint"
    )
    prometheus: bool = False


class UserConfig(BaseModel):
    """`<data-dir>/config.json` over `<user config dir>/managed-tools/config.json` (server/config_files.py)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    policy: dict[str, Policy] = Field(default_factory=dict, description="Per-tool permission policy overrides.")
    # Per tool: title, description, annotations, a stricter policy, fields kept from the model (overrides.py).
    overrides: dict[str, ToolOverride] = Field(default_factory=dict)
    approval_wait_seconds: ApprovalWait = Field(default=DEFAULT_APPROVAL_WAIT_SECONDS, alias="approvalWaitSeconds")
    custom_tools: list[CustomToolSpec] = Field(default_factory=list, alias="customTools")
    latent_tools: list[LatentToolSpec] = Field(default_factory=list, alias="latentTools")
    prompt_tools: list[PromptToolSpec] = Field(default_factory=list, alias="promptTools")
    vaults: dict[VaultName, Path] = Field(default_factory=dict, description="Read-only directories at /vaults/<name>.")
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    oauth: OAuthConfig | None = None
    approvals: Approvals = Field(default="form", description='"page": permission questions only on a one-time page.')
    # Values for the tools' variables: text literals, or {"env": "VAR"} (the only way to give a secret here).
    variables: dict[VariableName, ConfigValue] = Field(default_factory=dict)
    mcp_servers: UpstreamSpecs = Field(default_factory=dict, alias="mcpServers")
    # Which tools are served (tools/framework/toolsets.py); `serve --preset/--toolsets/--tools/--exclude-tools/
    # --read-only` win, key by key. The preset's name is checked with the toolsets' (with a did-you-mean).
    preset: str | None = None
    toolsets: list[str] | None = None
    tools: list[str] | None = None
    exclude_tools: list[str] | None = Field(default=None, alias="excludeTools")
    read_only: bool | None = Field(default=None, alias="readOnly")
    # Where the replicas' shared requestState key ring is (server/request_state_keys.py).
    request_state_keys: KeyRingSource | None = Field(default=None, alias="requestStateKeys")
    # The vault key replicas share (else the data dir's own key), from the same kinds of source.
    vault_key: KeyRingSource | None = Field(default=None, alias="vaultKey")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    # shell_run and shell_exec run unasked when they run inside the full sandbox (tools/shell/jobs.py `contained`).
    auto_sandboxed: bool = Field(default=False, alias="autoSandboxed")
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    # A new agent's substrate starts with AGENTS.md, SOUL.md, ... as first versions (tools/substrate/defaults.py).
    substrate_defaults: bool = Field(default=True, alias="substrateDefaults")
    # Tokens, time and calls per call and per session (tools/framework/budget.py); nothing limited by default.
    budgets: Budgets = Field(default_factory=Budgets)
    # The search profile (docs/tool-search.md): a small core listed, every other tool found with tools_search.
    # Unset: the preset's choice (`coding` searches; tools/framework/toolsets.py).
    tool_search: bool | None = Field(default=None, alias="toolSearch")
    # How list-shaped results are written for the model: "compact" is a header line and one line per row.
    result_format: ResultFormat = Field(default="json", alias="resultFormat")
    # Credentials in the shell's and upstream tools' arguments (ask) and results (mask): docs/security.md.
    secret_scanning: SecretScanning = Field(default_factory=SecretScanning, alias="secretScanning")
    quotas: QuotasConfig = Field(default_factory=QuotasConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    # The model that runs children, wakes and latent tools headless (server/providers/); by name, `default` runs.
    models: dict[VariableName, ModelProviderSpec] = Field(default_factory=dict)

    @field_validator("models")
    @classmethod
    def _one_runs(cls, value: dict[str, ModelProviderSpec]) -> dict[str, ModelProviderSpec]:
        if len(value) > 1 and chosen(value) is None:
            raise ValueError(f"name the entry that runs {DEFAULT_MODEL!r} (there are {len(value)}: {', '.join(value)})")
        return value


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
    prompt_tools: tuple[PromptToolSpec, ...] = ()  # config.json `promptTools` (tools/framework/prompt_tools.py)
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
    model: ModelProviderSpec | None = None  # config.json `models`' entry that runs (server/providers/spec.py)
    telemetry: TelemetryConfig = TelemetryConfig()  # config.json `telemetry` (server/otel.py)
    quotas: QuotasConfig = QuotasConfig()  # config.json `quotas`: each principal's calls over HTTP

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


DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_SESSION_IDLE_SECONDS = 1800.0
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_CONNECTIONS = 512  # well under the usual 1024 open-file limit, which SQLite and tools share
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
REPLICA_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"  # no '.': it ends the prefix of a session id (http_replica.py)
HOST_WITH_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]*):(\d+|\*)")  # `name:port`, `[v6]:port`, or `:*`


class HttpConfig(BaseModel):
    """How `serve --transport http|sse` listens and whom it lets in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    transport: Literal["http", "sse"]
    host: str = DEFAULT_HOST
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    stateless: bool = False
    token: SecretStr | None = None
    # Where the token this server made and keeps is (printed at start-up); None when the person gave the token.
    kept_token_file: Path | None = None
    oauth: OAuthConfig | None = None
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    max_request_bytes: Annotated[int, Field(gt=0)] = DEFAULT_MAX_REQUEST_BYTES
    max_sessions: Annotated[int, Field(gt=0)] = DEFAULT_MAX_SESSIONS
    session_idle_seconds: Annotated[float, Field(gt=0)] = DEFAULT_SESSION_IDLE_SECONDS
    header_timeout_seconds: Annotated[float, Field(gt=0)] = DEFAULT_HEADER_TIMEOUT_SECONDS
    body_timeout_seconds: Annotated[float, Field(gt=0)] = DEFAULT_BODY_TIMEOUT_SECONDS
    max_connections: Annotated[int, Field(gt=0)] = DEFAULT_MAX_CONNECTIONS
    replica: Annotated[str, Field(pattern=REPLICA_NAME)] | None = None

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_parse(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _entries(values, host_entry, "a host name or address, optionally with :PORT or :*")

    @field_validator("allowed_origins")
    @classmethod
    def _origins_parse(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _entries(
            values,
            origin_entry,
            "an origin: http:// or https:// and a host name or address, optionally with :PORT or :*",
        )

    @classmethod
    def build(
        cls,
        *,
        transport: Literal["http", "sse"],
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        stateless: bool = False,
        token_file: Path | None = None,
        environ: Mapping[str, str] | None = None,
        token_dir: Path | None = None,
        no_token: bool = False,
        oauth: OAuthConfig | None = None,
        allowed_hosts: tuple[str, ...] = (),
        allowed_origins: tuple[str, ...] = (),
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS,
        header_timeout_seconds: float = DEFAULT_HEADER_TIMEOUT_SECONDS,
        body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        replica: str | None = None,
    ) -> HttpConfig:
        """Resolve the token (`--token-file` wins over $MANAGED_TOOLS_TOKEN, else the one kept in `token_dir`, the
        data dir; without a `token_dir`, one for this process only) and the Host/Origin allowlists.

        Loopback names are always allowed; a specific bind address is added to the hosts. Refuses a bind
        beyond loopback without a token or OAuth, and two ways to authenticate at once. `no_token` is the explicit
        opt-out on loopback.
        """
        if stateless and transport == "sse":
            raise ConfigError("--stateless applies to Streamable HTTP (--transport http); SSE streams are sessions.")
        token = _read_token(token_file, os.environ if environ is None else environ)
        if token is not None and oauth is not None:
            raise ConfigError(
                f"Choose one way to authenticate: OAuth (config.json `oauth`, --oauth-*) or the static token "
                f"({TOKEN_ENV}, --token-file), not both."
            )
        if no_token and (token is not None or oauth is not None):
            raise ConfigError(f"--no-token contradicts {'OAuth' if oauth else f'{TOKEN_ENV} or --token-file'}.")
        if token is None and oauth is None and not is_loopback(host):
            raise ConfigError(
                f"Binding to {host or 'every interface'} exposes the server beyond this machine: set "
                f"{TOKEN_ENV} or --token-file, or configure OAuth (--oauth-issuer, --oauth-resource), so that "
                "every request must carry a bearer token."
            )
        kept: Path | None = None
        if token is None and oauth is None and not no_token:
            try:
                token, kept = kept_token(token_dir) if token_dir is not None else (_fresh_token(), None)
            except TokenFileError as exc:
                raise ConfigError(str(exc)) from None
        own = [] if host in WILDCARD_HOSTS or host in LOOPBACK_HOSTS else [f"[{host}]" if ":" in host else host]
        origins = [f"http://{name}" for name in LOOPBACK_HOSTS]
        return cls(
            transport=transport,
            host=host,
            port=port,
            stateless=stateless,
            token=token,
            kept_token_file=kept,
            oauth=oauth,
            allowed_hosts=_any_port([*LOOPBACK_HOSTS, *own, *allowed_hosts]),
            allowed_origins=_any_port([*origins, *allowed_origins]),
            max_request_bytes=max_request_bytes,
            max_sessions=max_sessions,
            session_idle_seconds=session_idle_seconds,
            header_timeout_seconds=header_timeout_seconds,
            body_timeout_seconds=body_timeout_seconds,
            max_connections=max_connections,
            replica=replica,
        )

    @property
    def binds_everywhere(self) -> bool:
        return self.host in WILDCARD_HOSTS


def _any_port(values: list[str]) -> tuple[str, ...]:
    """Each value as the SDK's allowlists read it: a value without a port is allowed on any port."""
    allowed: list[str] = []
    for value in values:
        has_port = HOST_WITH_PORT.fullmatch(value.split("://", 1)[-1]) is not None
        forms = [value] if has_port else [value, f"{value}:*"]
        allowed.extend(form for form in forms if form not in allowed)
    return tuple(allowed)


LOOPBACK_ALLOWED_HOSTS = _any_port(list(LOOPBACK_HOSTS))


def _entries(values: tuple[str, ...], parse: Callable[[str], Address | None], shape: str) -> tuple[str, ...]:
    for value in values:
        if parse(value) is None:
            raise ValueError(f"{value!r} is not {shape}")
    return values


def _fresh_token() -> SecretStr:
    return SecretStr(secrets.token_urlsafe(32))


def _read_token(token_file: Path | None, environ: Mapping[str, str]) -> SecretStr | None:
    if token_file is not None:
        try:
            raw = token_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"Cannot read the token file {token_file}: {type(exc).__name__}.") from None
        where = f"The token file {token_file}"
    else:
        raw = environ.get(TOKEN_ENV, "")
        where = TOKEN_ENV
        if not raw.strip():
            return None
    token = raw.strip()
    if not token:
        raise ConfigError(f"{where} is empty.")
    if not TOKEN_PATTERN.fullmatch(token):
        raise ConfigError(f"{where} must hold one token of at least 16 printable characters, without spaces.")
    return SecretStr(token)
