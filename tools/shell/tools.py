"""The shell hand (issue 6; reference §2g, §7): read-only `bash`, permission-gated `shell_run` / `shell_exec`,
the session's persistent shell, and its history. This module assembles the family's `DEFINITIONS` in publishing
order; each declaration lives beside its handler in `oneshot`, `persistent` or `history`.
"""

from __future__ import annotations

from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.shell import history, oneshot, persistent

DEFINITIONS: tuple[ToolDefinition, ...] = (*oneshot.DEFINITIONS, *persistent.DEFINITIONS, *history.DEFINITIONS)
