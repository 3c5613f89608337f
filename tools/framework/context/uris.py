"""The resource URIs under which the server shows memory stores, evaluations, the other session artifacts and
substrate files to a person."""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import quote, unquote

SCHEME = "managed-tools"
AGENT_TARGETS = ("workspace_memory", "workspace_memory_notes")
SESSION_TARGETS = ("session_state", "working_buffer", "checkpoint", "shell_state")
# The other per-session artifacts (reference §2, served as resources instead of .openboa-runtime files): the
# path under the session, and the view's name.
SESSION_VIEWS = {
    "outcome/history": "outcome_history",
    "permissions/posture": "permission_posture",
    "shell/history": "shell_history",
    "shell/last-output": "shell_last_output",
    "staging/manifest": "staging_manifest",
    "agent/setup": "agent_setup",
    "session/children": "children",
    "wakes/queued": "wake_requests",
}
_VIEW_PATHS = {view: path for path, view in SESSION_VIEWS.items()}


@dataclasses.dataclass(frozen=True)
class View:
    """A session artifact shown as the output of the tool that reads it (with its default arguments)."""

    tool: str
    title: str
    description: str


VIEWS = {
    "outcome_history": View("outcome_history", "Outcome history", "The session's outcome evaluations over time."),
    "permission_posture": View(
        "permissions_describe", "Permission posture",
        "Open permission requests, always-ask and outcome-gated tools, the shell and outcome posture.",
    ),
    "shell_history": View("shell_history", "Shell history", "The session's recent shell commands."),
    "shell_last_output": View("shell_read_last_output", "Shell last output",
                              "The last shell command's output, and the one running now."),
    "staging_manifest": View("resources_list_staged_drafts", "Staging manifest",
                             "Drafts staged from the substrate and whether each is ready to promote."),
    "agent_setup": View("agent_describe_setup", "Agent setup",
                        "The setup contract the session ran under, with per-section fingerprints."),
    "children": View("session_list_children", "Children",
                     "The session's child sessions; a child delegated with implicit communication updates it."),
    "wake_requests": View("session_list_wakes", "Scheduled wakes",
                          "The session's scheduled wakes (queued, or due and waiting for a client), soonest first."),
}  # fmt: skip
assert VIEWS.keys() == set(SESSION_VIEWS.values())
_SESSION = re.compile(rf"^{SCHEME}://sessions/([^/]+)/(memory/([a-z_]+)|outcome/evaluation|[a-z]+/[a-z-]+)$")
_AGENT = re.compile(rf"^{SCHEME}://agent/memory/([a-z_]+)$")


def memory_uri(target: str, session_id: str) -> str:
    if target in AGENT_TARGETS:
        return f"{SCHEME}://agent/memory/{target}"
    return f"{SCHEME}://sessions/{session_id}/memory/{target}"


def evaluation_uri(session_id: str) -> str:
    return f"{SCHEME}://sessions/{session_id}/outcome/evaluation"


def view_uri(view: str, session_id: str) -> str:
    """The URI of one of SESSION_VIEWS' artifacts of a session, by the view's name."""
    return f"{SCHEME}://sessions/{session_id}/{_VIEW_PATHS[view]}"


FILE_MOUNTS = {"workspace": "/workspace", "agent": "/workspace/agent"}
_FILE = re.compile(rf"^{SCHEME}://files/(workspace|agent)/(.+)$")


def file_uri(mount_path: str, relative: str) -> str | None:
    """The resource URI of a workspace or substrate file (vault files are not resources)."""
    name = next((key for key, path in FILE_MOUNTS.items() if path == mount_path), None)
    return None if name is None else f"{SCHEME}://files/{name}/{quote(relative, safe='/')}"


def parse_file(uri: str) -> str | None:
    """The virtual path a file URI names, or None."""
    match = _FILE.match(uri)
    return None if match is None else f"{FILE_MOUNTS[match[1]]}/{unquote(match[2])}"


def substrate_uri(relative: str) -> str:
    """A file of the agent's shared substrate, by its path relative to /workspace/agent."""
    return f"{SCHEME}://files/agent/{quote(relative, safe='/')}"


def parse(uri: str) -> tuple[str | None, str] | None:
    """(session id or None for agent stores, a memory target, "evaluation" or a view of SESSION_VIEWS), or None
    for a URI that is not ours."""
    if match := _AGENT.match(uri):
        return (None, match[1]) if match[1] in AGENT_TARGETS else None
    if match := _SESSION.match(uri):
        if match[2] == "outcome/evaluation":
            return match[1], "evaluation"
        if match[3] is None:
            return (match[1], SESSION_VIEWS[match[2]]) if match[2] in SESSION_VIEWS else None
        return (match[1], match[3]) if match[3] in SESSION_TARGETS else None
    return None


ATTACHMENT_SCHEME = "attachments"
_ATTACHMENT = re.compile(rf"^{ATTACHMENT_SCHEME}://([0-9a-f-]{{36}})/([0-9a-f-]{{36}})$")


def attachment_uri(session_id: str, attachment_id: str) -> str:
    return f"{ATTACHMENT_SCHEME}://{session_id}/{attachment_id}"


def parse_attachment(uri: str) -> tuple[str, str] | None:
    """(session id, attachment id) an attachment URI names, taken as written (nothing is decoded), or None."""
    match = _ATTACHMENT.match(uri)
    return None if match is None else (match[1], match[2])
