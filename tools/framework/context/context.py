"""What a handler gets: who is calling, where, the open transaction, the ports, and the deadline."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from managed_tools.sandbox.confine import Confinement
from managed_tools.sandbox.paths import PathGuard
from managed_tools.stores.approvals import PendingCaps
from managed_tools.stores.attachments import AttachmentLimits
from managed_tools.stores.db import Database, Tx
from managed_tools.stores.skills import SkillSet
from managed_tools.tools.framework.context.attachments import AttachmentRef, ResultFile, save
from managed_tools.tools.framework.context.budget import Budgets, BudgetTracker, unlimited
from managed_tools.tools.framework.context.ports import (
    ChildModel,
    ClientLog,
    Consent,
    HeadlessRun,
    ModelProvider,
    NoChildModel,
    NoReveal,
    NoVariableInput,
    Progress,
    Sampler,
    ToolReveal,
    VariableInput,
)
from managed_tools.tools.framework.context.variable_sources import VariableSources
from managed_tools.tools.framework.context.what_runs import WhatRuns
from managed_tools.tools.framework.wire.compact import ResultFormat
from managed_tools.tools.framework.wire.secret_scan import SecretScanning

if TYPE_CHECKING:
    from managed_tools.tools.framework.definitions.definition import ToolDefinition
    from managed_tools.tools.framework.definitions.registry import Registry


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
    skills: SkillSet = field(default_factory=SkillSet)  # reloaded when its files change (server/mcp/watch.py)
    attachment_limits: AttachmentLimits = field(default_factory=AttachmentLimits)
    variables: VariableSources = field(default_factory=VariableSources)  # the vault and config.json's values
    auto_sandboxed: bool = False  # `--auto-sandboxed`: what runs inside the full sandbox runs unasked (audited)
    budgets: Budgets = field(default_factory=Budgets)  # config.json `budgets` (tools/framework/context/budget.py)
    pending_caps: PendingCaps = field(default_factory=PendingCaps)  # config.json `pendingApprovals`
    tool_search: bool = False  # `--tool-search`: a small core listed, the rest found with tools_search
    result_format: ResultFormat = "json"  # `--result-format compact`: list-shaped results as a header and rows
    secret_scanning: SecretScanning = field(default_factory=SecretScanning)  # config.json `secretScanning`
    # config.json `models`: runs children and wakes headless, fulfils latent tools; None: only a client's model.
    model_provider: ModelProvider | None = None
    headless: HeadlessRun | None = None  # runs a session through a configured model provider; None without one


@dataclass(frozen=True)
class Attachment:
    """The durable session and the wake a connection is attached to, and the principal owning that session."""

    session_id: str
    wake_id: str
    transport: str
    owner: str  # stores.sessions.LOCAL_OWNER, or an OAuth principal (server/auth/principal.py)


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
    # Tools that tools_describe adds to this connection's list (the search profile); none by default.
    reveal: ToolReveal = field(default_factory=NoReveal)


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
    # What the result shows after its JSON text: attachments stored by `attach`, an image the read tool loaded.
    attachments: list[ResultFile] = field(default_factory=list)
    # The command, cwd and env a person approved for this call; the handler refuses to run anything else.
    approved_run: WhatRuns | None = None
    # The permission request by which a person approved this very call (asked now, or remembered for the
    # session); None when nobody was asked. A promotion records it as the person vouching for its sources.
    approval: str | None = None
    # The values of the tool's declared variables that resolved (tools/framework/calls/variables.py); never in arguments
    # or events.
    variables: Mapping[str, str] = field(default_factory=dict)
    # Which tools the caller may use (its OAuth scopes); None: every tool served. A routed call keeps it.
    may_use: Callable[[ToolDefinition], bool] | None = None
    # This call's budget: its limits, the session's use so far, what a model has spent for it (seed 002).
    budget: BudgetTracker = field(default_factory=unlimited)

    @property
    def agent_id(self) -> str:
        return self.runtime.environment.agent_id

    @property
    def session_id(self) -> str:
        return self.attachment.session_id

    @property
    def owner(self) -> str:
        """The principal the session belongs to: every session a tool reaches must be its too."""
        return self.attachment.owner

    @property
    def wake_id(self) -> str:
        return self.attachment.wake_id

    async def attach(self, data: bytes, *, name: str, mime_type: str) -> AttachmentRef:
        """Store a file or image this call produced as an attachment of the session; the result shows it (image
        content for an image, and a resource link). Put the returned ref in the output where its model has one.
        In a writing tool it is undone with the call; a tool with its own transactions calls it outside them."""
        stored = await save(self.runtime, self.tx, self.session_id, data, name=name, mime_type=mime_type)
        self.attachments.append(stored)
        assert stored.ref is not None
        return stored.ref
