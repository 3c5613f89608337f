"""The memory stores a call names (memory_read's targets): their scope, who writes each, and how each is rendered."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from managed_tools.stores import events, learnings, memory, outcomes, sessions
from managed_tools.stores.provenance import Provenance
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.shell import posture as shell_core

Target = Literal["session_state", "working_buffer", "workspace_memory", "workspace_memory_notes", "checkpoint",
                 "shell_state"]  # fmt: skip
VersionedTarget = Literal["session_state", "working_buffer", "workspace_memory_notes"]
WritableTarget = Literal["session_state", "working_buffer"]
MAX_CONTENT_CHARS = 1_000_000
DEFAULT_READ_CHARS = 20_000
NOTES_PLACEHOLDER = "_No managed memory notes yet._"


@dataclass(frozen=True)
class StoreInfo:
    title: str
    description: str
    scope: Literal["session", "agent"]
    written_by: str | None
    format: Literal["markdown", "json"]


STORES: dict[str, StoreInfo] = {
    "session_state": StoreInfo(
        "Session state", "What this session is doing and has decided.", "session", "memory_write", "markdown"
    ),
    "working_buffer": StoreInfo(
        "Working buffer", "Scratch notes for the task at hand.", "session", "memory_write", "markdown"
    ),
    "workspace_memory": StoreInfo(
        "Workspace memory", "The agent's MEMORY.md: promoted learnings and notes.", "agent", None, "markdown"
    ),
    "workspace_memory_notes": StoreInfo(
        "Workspace memory notes",
        "Notes shared by every session of the agent.",
        "agent",
        "memory_promote_note",
        "markdown",
    ),
    "checkpoint": StoreInfo("Checkpoint", "The session's status, cursor and outcome summary.", "session", None, "json"),
    "shell_state": StoreInfo(
        "Shell state", "The session's shell: cwd, env keys, last commands.", "session", None, "json"
    ),
}


def scope_of(ctx: ToolContext, target: str, session_id: str) -> str:
    return memory.agent_scope(ctx.agent_id) if STORES[target].scope == "agent" else session_id


async def workspace_memory(ctx: ToolContext) -> str:
    promoted = await learnings.latest(ctx.tx, ctx.agent_id, 50, promoted_only=True)
    notes = (await memory.read(ctx.tx, memory.agent_scope(ctx.agent_id), "workspace_memory_notes")).content.strip()
    lines = ["# MEMORY", "", "## Learnings", ""]
    lines += [f"- [{item.kind}] {item.title} — {item.detail}" for item in promoted] or ["_No promoted learnings yet._"]
    if hidden := await learnings.hidden(ctx.tx, ctx.agent_id, promoted_only=True):
        lines += ["", f"_{hidden} superseded or forgotten learning(s) left out (learning_list includeHidden: true)._"]
    lines += ["", "## Managed Memory Notes", "", notes or NOTES_PLACEHOLDER]
    return "\n".join(lines) + "\n"


async def checkpoint(ctx: ToolContext, session_id: str) -> str:
    session = await sessions.get_session(ctx.tx, session_id)
    count, _, last_event = await events.session_event_stats(ctx.tx, session_id)
    wake = await sessions.latest_wake(ctx.tx, session_id)
    outcome = await outcomes.active(ctx.tx, session_id)
    history = await outcomes.history(ctx.tx, session_id)
    view = {
        "sessionId": session_id,
        "agentId": session.agent_id,
        "status": session.status,
        "stopReason": session.stop_reason,
        "updatedAt": session.last_activity_at,
        "lastWakeId": None if wake is None else wake.id,
        "eventCursor": {"lastEventId": last_event, "eventCount": count},
        "lastSummary": await events.latest_summary(ctx.tx, session_id),
        "activeOutcome": None if outcome is None else {"title": outcome.title, "criteria": outcome.success_criteria},
        "outcomeEvaluationHistory": [
            {"iteration": h.iteration, "status": h.evaluation.get("status"), "evaluatedAt": h.evaluated_at}
            for h in history
        ],
    }
    return json.dumps({"checkpoint": view}, indent=2)


@dataclass(frozen=True)
class Rendered:
    """A store as a person or model reads it, with its latest version's id, hash and sources (versioned ones)."""

    content: str
    version_id: str | None = None
    content_hash: str | None = None
    provenance: Provenance | None = None


async def render(ctx: ToolContext, target: str, session_id: str) -> Rendered:
    if target == "workspace_memory":
        # Its notes' sources (the learnings in it were each approved by a person).
        notes = await memory.read(ctx.tx, memory.agent_scope(ctx.agent_id), "workspace_memory_notes")
        return Rendered(await workspace_memory(ctx), provenance=await memory.provenance_of(ctx.tx, notes.version_id))
    if target == "checkpoint":
        return Rendered(await checkpoint(ctx, session_id))
    if target == "shell_state":
        shell = await shell_core.posture(ctx.runtime, ctx.tx, session_id)
        return Rendered(json.dumps({"shellState": shell.model_dump(mode="json")}, indent=2))
    doc = await memory.read(ctx.tx, scope_of(ctx, target, session_id), target)
    sources = await memory.provenance_of(ctx.tx, doc.version_id)
    return Rendered(doc.content, doc.version_id, doc.content_hash, sources)
