"""Debug mode's check of a tool's output against its published output schema (tools/framework/calls/output_check.py):
on with MANAGED_TOOLS_CHECK_OUTPUT=1 (the suite's conftest sets it), off in production."""

from __future__ import annotations

import pytest

from managed_tools.tools.catalogue import build_registry
from managed_tools.tools.files.tools import ReadOutput
from managed_tools.tools.framework.calls import output_check
from managed_tools.tools.framework.calls.call_result import Refusal
from managed_tools.tools.framework.definitions.definition import ToolDefinition

SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def _read() -> ToolDefinition:
    definition = build_registry().get("read")
    assert definition is not None
    return definition


def _read_output() -> dict[str, object]:
    output = ReadOutput(
        path="notes.txt",
        mount_path="/workspace/notes.txt",
        content="one\ntwo\n",
        truncated=False,
        char_count=8,
        total_line_count=2,
        selected_line_count=2,
        line_window=None,
        showing="all",
        encoding="utf-8",
        invalid_utf8_replaced=False,
    )
    return output.model_dump(mode="json", by_alias=True)


def test_a_real_output_matches_its_published_schema() -> None:
    output_check.mismatch(_read(), _read_output())


def test_an_output_that_drifted_is_refused_naming_where_never_the_value() -> None:
    drifted = {**_read_output(), "charCount": SECRET}  # a string where the schema says integer
    del drifted["content"]
    with pytest.raises(Refusal) as refused:
        output_check.mismatch(_read(), drifted)
    message = str(refused.value)
    assert refused.value.kind == "internal"
    assert message.startswith("read's output does not match its output schema at ")
    assert "$ (required)" in message and "$.charCount (type)" in message
    assert SECRET not in message


def test_only_debug_mode_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    read, drifted = _read(), {"path": 1}
    monkeypatch.delenv(output_check.ENV)
    output_check.check(read, drifted)  # production: the handler's model was checked as it was built
    monkeypatch.setenv(output_check.ENV, "1")
    with pytest.raises(Refusal):
        output_check.check(read, drifted)
