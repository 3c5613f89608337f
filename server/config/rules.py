"""Rules shared by the command line and config.py, here so that parsing flags loads neither pydantic nor the SDK."""

from __future__ import annotations

import math
import re

TOKEN_ENV = "MANAGED_TOOLS_TOKEN"
DATABASE_ENV = "MANAGED_TOOLS_DATABASE"  # the PostgreSQL URL when --database is not given
VAULT_KEY_ENV = "MANAGED_TOOLS_VAULT_KEY"  # the vault key replicas share (server/config/request_state_keys.py)
# An agent or vault name: safe as a path component and in a log line.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAME_RULE = "1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"
# An approval question left unanswered this long is a person who is away; an hour bounds what a call can hold.
MAX_APPROVAL_WAIT_SECONDS = 3600.0
# The largest request either transport reads: an HTTP body, a stdio line.
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
APPROVAL_WAIT_RULE = f"a number of seconds above 0 and at most {MAX_APPROVAL_WAIT_SECONDS:g}"


def approval_wait_allowed(seconds: float) -> bool:
    return math.isfinite(seconds) and 0 < seconds <= MAX_APPROVAL_WAIT_SECONDS
