"""What a person reads when a command fails: one line on stderr and an exit status (server/cli/commands.py, and
each worker of `serve --workers N`, server/cli/serving.py)."""

from __future__ import annotations

import sys
import traceback

from managed_tools.server.config.data_dir import ConfigError


def reported(exc: Exception, command: str, log_level: str) -> int:
    """Say on stderr, in one line, what stopped `command` (the traceback too at DEBUG); the exit status."""
    if log_level == "DEBUG":
        traceback.print_exception(exc, file=sys.stderr)
    message, status = failure(exc, command)
    print(f"managed-tools: {message}", file=sys.stderr)
    return status


def failure(exc: Exception, command: str) -> tuple[str, int]:
    """What a person reads when `command` fails, and the exit status."""
    from pydantic import ValidationError

    human = sys.modules.get("managed_tools.server.consent.human")
    runtime = sys.modules.get("managed_tools.server.runtime.opening")  # a StartupError exists only once it is loaded
    if human is not None and isinstance(exc, human.HumanError):
        return str(exc), 1
    if isinstance(exc, ConfigError) or (runtime is not None and isinstance(exc, runtime.StartupError)):
        return str(exc), 2
    if isinstance(exc, ValidationError):  # the flags, checked as a whole
        return f"invalid configuration: {exc.errors(include_url=False)[0]['msg']}", 2
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:  # a task group's one failure
        exc = exc.exceptions[0]
    return f"{command} stopped on an unexpected error: {type(exc).__name__}: {exc} (--log-level debug shows where).", 1
