"""Where a tool's variables get their values besides the session: the agent's vault and the server's config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from managed_tools.stores.vault import Vault

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class EnvReference(BaseModel):
    """config.json `variables.NAME: {"env": "VAR"}`: the value is the server's environment variable VAR, read
    when a call needs it. The only way config.json gives a secret: the file itself holds no secret."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env: Annotated[str, Field(pattern=ENV_NAME)]


ConfigValue = str | EnvReference


def config_value(value: ConfigValue) -> str | None:
    if isinstance(value, str):
        return value
    return os.environ.get(value.env) or None


@dataclass(frozen=True)
class VariableSources:
    """The vault (None: no secrets here) and config.json's `variables`."""

    vault: Vault | None = None
    config: Mapping[str, ConfigValue] = field(default_factory=dict)
