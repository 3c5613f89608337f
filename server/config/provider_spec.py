"""config.json `models`: the model the server runs children, wakes and latent tools with when no client lends its
own. Only the operator writes it (config.json lies outside every mount); its key is a `${vault:NAME}` reference,
never the key itself."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from managed_tools.server.config.served_urls import ServedUrl

VAULT_REFERENCE = r"^\$\{vault:([A-Za-z_][A-Za-z0-9_]*)\}$"
DEFAULT_MODEL = "default"


class ModelLimits(BaseModel):
    """What one run may spend: model turns, tokens (input and output, as the provider counts them), wall time."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    turns: Annotated[int, Field(ge=1, le=100)] = 10
    tokens: Annotated[int, Field(ge=100, le=10_000_000)] = 200_000
    wall_seconds: Annotated[float, Field(ge=1, le=3600, alias="wallSeconds")] = 300.0
    output_tokens: Annotated[int, Field(ge=16, le=128_000, alias="outputTokens")] = 4096  # per turn


class ModelProviderSpec(BaseModel):
    """One entry of `models`: which API, its endpoint URL (the full path, e.g. .../v1/chat/completions), the
    model's name and the key's vault reference (none for a local server that takes no key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api: Literal["openai", "anthropic"] = Field(description="openai: chat completions; anthropic: Messages API.")
    url: ServedUrl
    model: Annotated[str, Field(min_length=1, max_length=200)]
    key: Annotated[str, Field(pattern=VAULT_REFERENCE)] | None = Field(
        default=None, description="${vault:NAME}: the key is the vault's secret NAME (managed-tools secret set NAME)."
    )
    limits: ModelLimits = Field(default_factory=ModelLimits)


def chosen(models: dict[str, ModelProviderSpec]) -> ModelProviderSpec | None:
    """The entry that runs: the one named `default`, or the only one. Several without a `default` is refused at
    start-up (ServeConfig.build), so a guess never picks a model the operator did not mean."""
    if DEFAULT_MODEL in models:
        return models[DEFAULT_MODEL]
    return next(iter(models.values())) if len(models) == 1 else None
