"""What a handler gets: who is calling, where, the open transaction, the ports, and the deadline."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from managed_tools.stores.confine import Confinement
from managed_tools.stores.db import Database, Tx
from managed_tools.stores.paths import PathGuard
from managed_tools.stores.skills import SkillSet
from managed_tools.tools.content import Block
from managed_tools.tools.ports import (
    ChildModel,
    ClientLog,
    Consent,
    NoChildModel,
    NoVariableInput,
    Progress,
    Sampler,
    VariableInput,
)
from managed_tools.tools.variable_sources import VariableSources
from managed_tools.tools.what_runs import WhatRuns

if TYPE_CHECKING:
    from managed_tools.tools.registry import Registry


class Environment(BaseModel):
    """The server's fixed surroundings, set by the user at start-up and never by a tool."""

    model_config = ConfigDict(frozen=True)

    agent_id: str
    workspace: Path
    data_dir: Path
    server_name: str
    server_version: str
    vaults: dict[str, Path] = {}


@dataclass(frozen=True)
class Runtime:
    """Process-wide parts shared by every connection."""

    environment: Environment
    db: Database
    registry: Registry
    guard: PathGuard
    confinement: Confinement
    skills: SkillSet = field(default_factory=SkillSet)  # reloaded when its files change (server/watch.py)
    variables: VariableSources = field(default_factory=VariableSources)  # the vault and config.json's values


@dataclass(frozen=True)
class Attachment:
    """The durable session and the wake a connection is attached to."""

    session_id: str
    wake_id: str
    transport: str


@dataclass(frozen=True)
class Ports:
    consent: Consent
    progress: Progress
    sampler: Sampler
    client_log: ClientLog
    # The client's model running a child session (session_run_child); absent for most clients.
    child_model: ChildModel = field(default_factory=NoChildModel)
    # A person asked for a required variable's missing value; nobody by default.
    variables: VariableInput = field(default_factory=NoVariableInput)


@dataclass(frozen=True)
class ToolContext:
    runtime: Runtime
    attachment: Attachment
    ports: Ports
    tx: Tx
    deadline: float
    log: logging.Logger
    # URIs of the resources (memory stores, evaluations) this call changed; notified once it commits.
    touched: set[str] = field(default_factory=set)
    # Blocks the result shows after its JSON text (an image the read tool loaded).
    attachments: list[Block] = field(default_factory=list)
    # The command, cwd and env a person approved for this call; the handler refuses to run anything else.
    approved_run: WhatRuns | None = None
    # The values of the tool's declared variables that resolved (tools/variables.py); never in arguments or events.
    variables: Mapping[str, str] = field(default_factory=dict)

    @property
    def agent_id(self) -> str:
        return self.runtime.environment.agent_id

    @property
    def session_id(self) -> str:
        return self.attachment.session_id

    @property
    def wake_id(self) -> str:
        return self.attachment.wake_id
