"""What `config.json` may hold: the models of the user's config files (server/config/config_files.py reads and merges
them, server/config/serve_config.py validates them and lays the flags over them). Only the user writes them; no tool can
reach them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from managed_tools.sandbox.egress import NetworkConfig
from managed_tools.sandbox.policy import Limits
from managed_tools.server.config.provider_spec import DEFAULT_MODEL, ModelProviderSpec, chosen
from managed_tools.server.config.request_state_keys import KeyRingSource
from managed_tools.server.config.rules import APPROVAL_WAIT_RULE, NAME, approval_wait_allowed
from managed_tools.server.config.served_urls import ServedUrl
from managed_tools.server.config.upstream_spec import UpstreamSpecs
from managed_tools.stores.approvals import PendingCaps
from managed_tools.stores.retention import EVERY_SECONDS, Retention
from managed_tools.tools.framework.context.budget import Budgets
from managed_tools.tools.framework.context.variable_sources import ENV_NAME, ConfigValue
from managed_tools.tools.framework.definitions.custom import CustomToolSpec
from managed_tools.tools.framework.definitions.latent import LatentToolSpec
from managed_tools.tools.framework.definitions.overrides import ToolOverride
from managed_tools.tools.framework.definitions.prompt_tools import PromptToolSpec
from managed_tools.tools.framework.wire.compact import ResultFormat
from managed_tools.tools.framework.wire.secret_scan import SecretScanning

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


class SkillsConfig(BaseModel):
    """config.json `skills` (reference §8): `directories` replace the default ones, `include` is a name allowlist."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    include: tuple[str, ...] | None = None
    directories: tuple[Path, ...] | None = None


SCOPE_TOKEN = r"^[\x21\x23-\x5b\x5d-\x7e]{1,128}$"  # RFC 6749 scope-token characters


class OAuthConfig(BaseModel):
    """config.json `oauth` (or the `--oauth-*` flags): this server as an OAuth 2.1 resource server
    (server/auth/oauth.py)."""

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
    # how often a running server applies it again (a bounded pass each time), besides at its start
    every_seconds: Annotated[int, Field(ge=1, le=86_400)] = Field(default=int(EVERY_SECONDS), alias="everySeconds")

    def policy(self) -> Retention:
        return Retention(self.events_max_age_days, self.events_max_per_session, every_seconds=self.every_seconds)


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
    """config.json `quotas` (server/http/quotas.py): each OAuth principal's (bounded by default, a team shares the
    server) and the one local principal's (the static token or none: the operator's own, unbounded by default)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    oauth: Quota = OAUTH_QUOTA
    token: Quota = Quota()


class TelemetryConfig(BaseModel):
    """config.json `telemetry` (server/runtime/otel.py): traces and metrics over OTLP/HTTP to `otlpEndpoint` (the
    collector's base URL), and `/metrics` for Prometheus on HTTP. The standard OTEL_* environment turns them on as
    well."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    otlp_endpoint: Annotated[str, Field(pattern=r"^https?://[^\s/]+(/\S*)?$")] | None = Field(
        default=None, alias="otlpEndpoint"
    )
    prometheus: bool = False


class UserConfig(BaseModel):
    """`<data-dir>/config.json` over `<user config dir>/managed-tools/config.json` (server/config/config_files.py)."""

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
    # Which tools are served (tools/framework/definitions/toolsets.py); `serve
    # --preset/--toolsets/--tools/--exclude-tools/
    # --read-only` win, key by key. The preset's name is checked with the toolsets' (with a did-you-mean).
    preset: str | None = None
    toolsets: list[str] | None = None
    tools: list[str] | None = None
    exclude_tools: list[str] | None = Field(default=None, alias="excludeTools")
    read_only: bool | None = Field(default=None, alias="readOnly")
    # Where the replicas' shared requestState key ring is (server/config/request_state_keys.py).
    request_state_keys: KeyRingSource | None = Field(default=None, alias="requestStateKeys")
    # The vault key replicas share (else the data dir's own key), from the same kinds of source.
    vault_key: KeyRingSource | None = Field(default=None, alias="vaultKey")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    # shell_run and shell_exec run unasked when they run inside the full sandbox (tools/shell/jobs.py `contained`).
    auto_sandboxed: bool = Field(default=False, alias="autoSandboxed")
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    # A new agent's substrate starts with AGENTS.md, SOUL.md, ... as first versions (tools/substrate/defaults.py).
    substrate_defaults: bool = Field(default=True, alias="substrateDefaults")
    # Tokens, time and calls per call and per session (tools/framework/context/budget.py); nothing limited by default.
    budgets: Budgets = Field(default_factory=Budgets)
    # The search profile (docs/tool-search.md): a small core listed, every other tool found with tools_search.
    # Unset: the preset's choice (`coding` searches; tools/framework/definitions/toolsets.py).
    tool_search: bool | None = Field(default=None, alias="toolSearch")
    # How list-shaped results are written for the model: "compact" is a header line and one line per row.
    result_format: ResultFormat = Field(default="json", alias="resultFormat")
    # Credentials in the shell's and upstream tools' arguments (ask) and results (mask): docs/security.md.
    secret_scanning: SecretScanning = Field(default_factory=SecretScanning, alias="secretScanning")
    quotas: QuotasConfig = Field(default_factory=QuotasConfig)
    # Requests waiting for a person at once, per session and per principal, held in the store (stores/approvals.py).
    pending_approvals: PendingCaps = Field(default_factory=PendingCaps, alias="pendingApprovals")
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    # The model that runs children, wakes and latent tools headless (server/providers/); by name, `default` runs.
    models: dict[VariableName, ModelProviderSpec] = Field(default_factory=dict)

    @field_validator("models")
    @classmethod
    def _one_runs(cls, value: dict[str, ModelProviderSpec]) -> dict[str, ModelProviderSpec]:
        if len(value) > 1 and chosen(value) is None:
            raise ValueError(f"name the entry that runs {DEFAULT_MODEL!r} (there are {len(value)}: {', '.join(value)})")
        return value
