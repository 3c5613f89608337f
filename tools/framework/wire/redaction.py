"""Secrets never shown, recorded or logged: every value resolved for a call, ours or an upstream server's.

`KNOWN` holds each secret this process has resolved (a tool's secret variable, an upstream's `${vault:NAME}` in
its env or headers). The executor removes all of them from every result, error and event it records, whatever tool
the value turns up in; and from the first one on, every log record is made with them removed too (its message and
its traceback), whichever logger wrote it: ours, the SDK's, httpx's.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

REDACTED = "[secret redacted]"


class Secrets:
    """The process's secret values, longest first (so no part of a longer one survives a shorter one's removal)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: frozenset[str] = frozenset()
        self.ordered: tuple[str, ...] = ()
        # Shapes of short-lived capabilities (a page's URL token) that no log line may carry, whoever logs it.
        self.log_patterns: tuple[re.Pattern[str], ...] = ()

    def add(self, values: Iterable[str]) -> None:
        with self._lock:
            fresh = {value for value in values if value} - self._values
            if not fresh:
                return
            self._values |= fresh
            self.ordered = tuple(sorted(self._values, key=len, reverse=True))
        redact_log_records()

    def hide_in_logs(self, pattern: re.Pattern[str]) -> None:
        with self._lock:
            if pattern not in self.log_patterns:
                self.log_patterns += (pattern,)
        redact_log_records()


KNOWN = Secrets()


def scrub_log_text(text: str) -> str:
    """A log line's text with every known secret and every capability shape removed."""
    for pattern in KNOWN.log_patterns:
        text = pattern.sub(REDACTED, text)
    return _scrub(text, KNOWN.ordered) if KNOWN.ordered else text


def scrub(value: Any, hidden: Iterable[str] | None = None) -> Any:
    """Every string in `value` (nested in lists and dicts too) with each hidden value replaced; by default every
    known secret."""
    ordered = KNOWN.ordered if hidden is None else tuple(sorted(hidden, key=len, reverse=True))
    return _scrub(value, ordered) if ordered else value


def _scrub(value: Any, ordered: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        for secret in ordered:
            if secret:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, list):
        return [_scrub(item, ordered) for item in value]
    if isinstance(value, dict):
        return {key: _scrub(item, ordered) for key, item in value.items()}
    return value


_EXCEPTIONS = logging.Formatter()


def redact_log_records() -> None:
    """From now on, every log record is made with the known secrets removed; installed once per process."""
    made = logging.getLogRecordFactory()
    if getattr(made, "redacts_secrets", False):
        return

    def redacted(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = made(*args, **kwargs)
        if not KNOWN.ordered and not KNOWN.log_patterns:
            return record
        try:
            message = record.getMessage()
        except Exception:  # arguments that do not fit the message: logging reports it when it is emitted
            return record
        cleaned = scrub_log_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info:
            record.exc_text = scrub_log_text(_EXCEPTIONS.formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = scrub_log_text(record.stack_info)
        return record

    redacted.redacts_secrets = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacted)
