"""The mounted filesystem: which virtual paths map to which host directories, and with what access."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

# "attachments" is never among the mounts the tools list: the guard builds it for one owned attachment at a time.
MountKind = Literal["workspace", "agent_substrate", "vault", "attachments"]


class Mount(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: MountKind
    mount_path: str
    root: Path
    access: Literal["read_write", "read_only"]
    scope: Literal["agent", "user"]
    prompt: str


def substrate_dir(data_dir: Path, agent_id: str) -> Path:
    """Where the agent's shared substrate lives: inside the data dir, reachable only through promotion."""
    return data_dir / "agents" / agent_id / "substrate"


def default_mounts(workspace: Path, data_dir: Path, agent_id: str, vaults: dict[str, Path]) -> list[Mount]:
    mounts = [
        Mount(
            kind="workspace",
            mount_path="/workspace",
            root=workspace,
            access="read_write",
            scope="user",
            prompt="The user's project. Read and write files here.",
        ),
        Mount(
            kind="agent_substrate",
            mount_path="/workspace/agent",
            root=substrate_dir(data_dir, agent_id),
            access="read_only",
            scope="agent",
            prompt="The agent's shared substrate. Change it only through stage, compare and promote.",
        ),
    ]
    mounts.extend(
        Mount(
            kind="vault",
            mount_path=f"/vaults/{name}",
            root=path,
            access="read_only",
            scope="user",
            prompt="A read-only vault: only its listing is visible.",
        )
        for name, path in sorted(vaults.items())
    )
    return mounts
