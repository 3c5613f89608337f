"""The answer to a stdio frame the SDK could not take as a message, so that no client waits on its own timeout.

The SDK's stdio reader turns a line it cannot validate into an exception the server only logs, and takes a
request whose id is neither a string nor an integer (`"id": 1.5`) for a notification, which gets no answer either.
Over HTTP the same bytes get a 400 at once. Here each such frame is answered like HTTP answers it: the JSON-RPC
error with the frame's id where one can be read, else with `"id": null`.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import mcp_types as types
from pydantic import ValidationError

# A 5,000-digit integer stops Python's int() (sys.int_info.default_max_str_digits); read as "no number" instead,
# so the rest of the frame, its id included, still reads.
_MAX_INT_DIGITS = sys.int_info.default_max_str_digits
# The id of a frame too broken to parse, read from its opening: `{"jsonrpc": "2.0", "id": 7, "method": ...`,
# up to the first nested value, so that an "id" inside the arguments is never taken for the frame's. The id must
# be followed by what ends a member (`,` or `}`): a frame cut inside its id (`"id": 12` of 123) has none to read.
_OPENING_ID = re.compile(r'^\s*\{[^{}\[\]]*?"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,256}")\s*[,}]')
_BATCH = "JSON-RPC batches are not part of MCP: send each request as its own line"
_BAD_ID = "a request's id must be a string or an integer"


def _number(text: str) -> int | None:
    return int(text) if len(text.lstrip("-")) <= _MAX_INT_DIGITS else None


def _request_id(value: object) -> types.RequestId | None:
    return value if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)) else None


def _error(request_id: types.RequestId | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


def _reason(problem: Exception) -> str:
    if isinstance(problem, ValidationError) and problem.errors():
        return problem.errors()[0]["msg"]
    return str(problem) or type(problem).__name__


def answers_to_unreadable(line: str, problem: Exception) -> list[types.JSONRPCError]:
    """What to send back for a line the SDK could not validate as a JSON-RPC message."""
    try:
        frame: Any = json.loads(line, parse_int=_number)
    except (ValueError, RecursionError):
        found = _OPENING_ID.match(line)
        request_id = _request_id(json.loads(found.group(1))) if found else None
        return [_error(request_id, types.PARSE_ERROR, f"Parse error: {_reason(problem)}")]
    if isinstance(frame, list):
        ids = [_request_id(item.get("id")) for item in frame if isinstance(item, dict)]
        return [_error(i, types.INVALID_REQUEST, _BATCH) for i in ids if i is not None] or [
            _error(None, types.INVALID_REQUEST, _BATCH)
        ]
    request_id = _request_id(frame.get("id")) if isinstance(frame, dict) else None
    return [_error(request_id, types.INVALID_REQUEST, f"Invalid request: {_reason(problem)}")]


def answer_to_oversized(opening: str, limit: int) -> types.JSONRPCError:
    """The answer to a line over `limit` bytes, dropped unread but for its `opening`."""
    found = _OPENING_ID.match(opening)
    request_id = _request_id(json.loads(found.group(1))) if found else None
    message = f"Invalid request: a line over {limit} bytes is not read; send smaller requests"
    return _error(request_id, types.INVALID_REQUEST, message)


def answer_to_misread_notification(line: str) -> types.JSONRPCError | None:
    """A frame the SDK read as a notification although it carries an id (one of the wrong type): its sender waits
    for an answer, so it gets the error a request with a bad id deserves."""
    try:
        frame: Any = json.loads(line, parse_int=_number)
    except (ValueError, RecursionError):
        return None
    if isinstance(frame, dict) and "id" in frame:
        return _error(None, types.INVALID_REQUEST, f"Invalid request: {_BAD_ID}, not {json.dumps(frame['id'])[:40]}")
    return None
