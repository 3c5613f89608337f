"""Memory stores (reference §2d, §3): list, read, write with versions and preconditions, promote notes, learnings.

| target | scope | how it changes |
|---|---|---|
| session_state, working_buffer | session | memory_write (replace/append), versioned |
| workspace_memory_notes | agent | memory_promote_note (always_ask, outcome-gated) and memory_correct, versioned |
| workspace_memory | agent | read-only: promoted learnings plus the notes |
| checkpoint, shell_state | session | read-only JSON views of session state |
"""

from __future__ import annotations

from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.models import NoArguments
from managed_tools.tools.memory.correct import (
    CorrectArgs,
    CorrectOutput,
    correct_check,
    correct_preview,
    memory_correct,
)
from managed_tools.tools.memory.learning import (
    LearningListArgs,
    LearningListOutput,
    RecordArgs,
    RecordOutput,
    learning_gate,
    learning_list,
    learning_preview,
    learning_record,
    promotes,
)
from managed_tools.tools.memory.reading import (
    ListOutput,
    ReadArgs,
    ReadOutput,
    ReadVersionArgs,
    ReadVersionOutput,
    VersionsArgs,
    VersionsOutput,
    memory_list,
    memory_list_versions,
    memory_read,
    memory_read_version,
)
from managed_tools.tools.memory.targets import MAX_CONTENT_CHARS
from managed_tools.tools.memory.writing import (
    PromoteArgs,
    PromoteOutput,
    WriteArgs,
    WriteOutput,
    memory_promote_note,
    memory_write,
    promote_gate,
    promote_preview,
    promote_untrusted,
)

DEFINITIONS = (
    ToolDefinition(
        name="memory_list",
        title="List memory stores",
        description="List the memory stores (memory_read's targets) and who writes each.",
        input_model=NoArguments,
        output_model=ListOutput,
        handler=memory_list,
        effects=("memory_read",),
        idempotent=True,
    ),
    ToolDefinition(
        name="memory_read",
        title="Read a memory store",
        description="Read one memory store's current content, with its version id and content hash.",
        input_model=ReadArgs,
        output_model=ReadOutput,
        handler=memory_read,
        effects=("memory_read",),
    ),
    ToolDefinition(
        name="memory_write",
        title="Write session memory",
        description="Replace or append session_state or working_buffer; every write is a version "
        "(expectedVersionId: compare-and-swap).",
        input_model=WriteArgs,
        output_model=WriteOutput,
        handler=memory_write,
        read_only=False,
        effects=("memory_write",),
        max_argument_bytes=4 * MAX_CONTENT_CHARS + 4096,
        examples=(
            ToolExample(
                description="Append progress to the session state",
                input={"target": "session_state", "content": "- tests pass", "mode": "append"},
            ),
        ),
    ),
    ToolDefinition(
        name="memory_list_versions",
        title="List memory versions",
        description="List the versions of a memory store, newest first, to read or restore an older one.",
        input_model=VersionsArgs,
        output_model=VersionsOutput,
        handler=memory_list_versions,
        effects=("memory_read",),
    ),
    ToolDefinition(
        name="memory_read_version",
        title="Read a memory version",
        description="Read one immutable version of a memory store by its versionId.",
        input_model=ReadVersionArgs,
        output_model=ReadVersionOutput,
        handler=memory_read_version,
        effects=("memory_read",),
    ),
    ToolDefinition(
        name="memory_promote_note",
        title="Promote a workspace note",
        description="Write the agent's shared workspace memory notes. A person approves each call; gated on a "
        "passing outcome.",
        input_model=PromoteArgs,
        output_model=PromoteOutput,
        handler=memory_promote_note,
        read_only=False,
        permission_policy="always_ask",
        effects=("memory_write",),
        precondition=promote_gate,
        asks_because=promote_untrusted,
        consent_preview=promote_preview,
        max_argument_bytes=4 * MAX_CONTENT_CHARS + 4096,
    ),
    ToolDefinition(
        name="learning_record",
        title="Record a learning",
        description="Record a lesson, correction or error for later sessions; promoting it to the shared MEMORY.md "
        "or superseding one asks a person.",
        input_model=RecordArgs,
        output_model=RecordOutput,
        handler=learning_record,
        asks_when=promotes,
        precondition=learning_gate,
        consent_preview=learning_preview,
        read_only=False,
        effects=("memory_write",),
    ),
    ToolDefinition(
        name="learning_list",
        title="List learnings",
        description="List the agent's latest learnings, oldest first.",
        input_model=LearningListArgs,
        output_model=LearningListOutput,
        handler=learning_list,
        effects=("learning_read",),
    ),
    ToolDefinition(
        name="memory_correct",
        title="Correct shared memory",
        description="Supersede, forget or restore a learning or the notes; a person approves.",
        input_model=CorrectArgs,
        output_model=CorrectOutput,
        handler=memory_correct,
        read_only=False,
        permission_policy="always_ask",
        effects=("memory_write",),
        precondition=correct_check,
        consent_preview=correct_preview,
        max_argument_bytes=4 * MAX_CONTENT_CHARS + 4096,
        examples=(
            ToolExample(
                description="Forget a learning that proved wrong",
                input={"action": "forget", "learningId": "lrn_01", "reason": "the suite moved to tox"},
            ),
        ),
    ),
)
