"""A call's answer written once (server/publishing/publish.py `to_wire_result`): the mapping handed to the SDK is
exactly what a `CallToolResult` of the same result would dump to, and passes the SDK's check of each era alike."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from mcp_types import methods as protocol

from managed_tools.server.publishing.publish import (
    ACTION_META_KEY,
    ERROR_META_KEY,
    WITHHELD_META_KEY,
    to_mcp_content,
    to_wire_result,
)
from managed_tools.tools.framework.calls.call_result import CallResult
from managed_tools.tools.framework.wire.content import ImageBlock, ResourceBlock, TextBlock

VERSIONS = ["2025-11-25", "2026-07-28"]
STRUCTURED = {"path": "a.txt", "content": 'é\n"quoted"\n', "lines": 2, "window": None, "ok": True}


def _dumped(model: types.CallToolResult) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


CASES = [
    (
        CallResult("success", '{"path":"a.txt"}', STRUCTURED),
        types.CallToolResult(
            content=[types.TextContent(type="text", text='{"path":"a.txt"}')], structured_content=STRUCTURED
        ),
    ),
    (
        CallResult("success", "{}", {"shown": 1}, withheld={"secretish": "for the person"}),
        types.CallToolResult(
            content=[types.TextContent(type="text", text="{}")],
            structured_content={"shown": 1},
            _meta={WITHHELD_META_KEY: {"secretish": "for the person"}},
        ),
    ),
    (
        CallResult(
            "success",
            "{}",
            {},
            content=(
                TextBlock(text="shown"),
                ImageBlock(data="aGk=", mime_type="image/png"),
                ResourceBlock(uri="file:///workspace/a.txt", mime_type="text/plain", text="hi"),
            ),
        ),
        types.CallToolResult(
            content=[
                types.TextContent(type="text", text="shown"),
                to_mcp_content(ImageBlock(data="aGk=", mime_type="image/png")),
                to_mcp_content(ResourceBlock(uri="file:///workspace/a.txt", mime_type="text/plain", text="hi")),
            ],
            structured_content={},
        ),
    ),
    (
        CallResult("blocked", "Waiting for a person.", error_kind="permission", action_required={"requestId": "r1"}),
        types.CallToolResult(
            content=[types.TextContent(type="text", text="Waiting for a person.")],
            is_error=True,
            _meta={ERROR_META_KEY: {"kind": "permission", "status": "blocked"}, ACTION_META_KEY: {"requestId": "r1"}},
        ),
    ),
]


@pytest.mark.parametrize(("result", "model"), CASES)
def test_the_wire_form_is_the_models_dump(result: CallResult, model: types.CallToolResult) -> None:
    wire = to_wire_result(result)
    assert wire == _dumped(model)
    if result.structured is not None:  # the executor's dict itself, not a copy made on the way
        assert wire["structuredContent"] is result.structured


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("result", "model"), CASES)
def test_each_era_sends_what_it_sent_for_the_model(
    version: str, result: CallResult, model: types.CallToolResult
) -> None:
    sent = protocol.serialize_server_result("tools/call", version, dict(to_wire_result(result)))
    assert sent == protocol.serialize_server_result("tools/call", version, _dumped(model))
