"""The user's configuration of one server process. Only the user sets it; no tool can change it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

AgentName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
STATE_FILE = "state.db"


class ServeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace: Path
    data_dir: Path
    agent: AgentName = "default"
    session: str | None = None
    busy_timeout_ms: Annotated[int, Field(ge=0)] = 5_000

    @classmethod
    def build(
        cls, *, workspace: Path | None, data_dir: Path | None, agent: str = "default", session: str | None = None
    ) -> ServeConfig:
        """Resolve the defaults: the current directory, and `<workspace>/.managed-tools` for the data."""
        root = (workspace or Path.cwd()).expanduser().resolve()
        data = (data_dir or root / ".managed-tools").expanduser().resolve()
        return cls(workspace=root, data_dir=data, agent=agent, session=session)

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE
