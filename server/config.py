"""The user's configuration of one server process. Only the user sets it; no tool can read or change it.

Two sources: command-line flags, and an optional `config.json` in the data dir (outside every mount, so the
file tools cannot reach it). Flags win over the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.custom import CustomToolSpec

AgentName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
VaultName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
Policy = Literal["always_allow", "always_ask"]
STATE_FILE = "state.db"
CONFIG_FILE = "config.json"
DEFAULT_APPROVAL_WAIT_SECONDS = 120.0


class ConfigError(Exception):
    """The configuration is unusable; the message says which file or flag and why."""


class UserConfig(BaseModel):
    """`<data-dir>/config.json`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    policy: dict[str, Policy] = Field(default_factory=dict, description="Per-tool permission policy overrides.")
    approval_wait_seconds: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=DEFAULT_APPROVAL_WAIT_SECONDS, alias="approvalWaitSeconds"
    )
    custom_tools: list[CustomToolSpec] = Field(default_factory=list, alias="customTools")
    vaults: dict[VaultName, Path] = Field(default_factory=dict, description="Read-only directories at /vaults/<name>.")


def load_user_config(data_dir: Path) -> UserConfig:
    path = data_dir / CONFIG_FILE
    if not path.exists():
        return UserConfig()
    try:
        return UserConfig.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Cannot read {path}: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path} is invalid at {where or 'the top level'}: {first['msg']}") from exc


class ServeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace: Path
    data_dir: Path
    agent: AgentName = "default"
    session: str | None = None
    busy_timeout_ms: Annotated[int, Field(ge=0)] = 5_000
    policy: dict[str, Policy] = Field(default_factory=dict)
    approval_wait_seconds: float = DEFAULT_APPROVAL_WAIT_SECONDS
    custom_tools: tuple[CustomToolSpec, ...] = ()
    tool_modules: tuple[str, ...] = ()
    vaults: dict[VaultName, Path] = Field(default_factory=dict)

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
    ) -> ServeConfig:
        """Resolve the defaults (the current directory, `<workspace>/.managed-tools`) and merge the file."""
        root = (workspace or Path.cwd()).expanduser().resolve()
        data = (data_dir or root / ".managed-tools").expanduser().resolve()
        user = load_user_config(data)
        policy = dict(user.policy)
        policy.update(dict.fromkeys(allow, "always_allow"))
        policy.update(dict.fromkeys(ask, "always_ask"))
        return cls(
            workspace=root,
            data_dir=data,
            agent=agent,
            session=session,
            policy=policy,
            approval_wait_seconds=approval_wait_seconds or user.approval_wait_seconds,
            custom_tools=tuple(user.custom_tools),
            tool_modules=tool_modules,
            vaults={name: path.expanduser().resolve() for name, path in {**user.vaults, **(vaults or {})}.items()},
        )

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE
