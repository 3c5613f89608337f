"""Numbers and booleans given as strings (`read {"startLine": "3"}`, `session_list {"includeCurrent": "false"}`)
are accepted, as the server's instructions say; a string that is no number is refused naming the field. Through a
real MCP client in both protocol eras."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ERAS, Connect, data, error_text

from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ERAS)
async def test_numbers_and_booleans_as_strings_are_accepted(
    runtime: Runtime, connect: Connect, workspace: Path, mode: str
) -> None:
    (workspace / "notes.txt").write_text("one\ntwo\nthree\nfour\n")
    async with connect(runtime, mode) as client:
        as_numbers = data(await client.call_tool("read", {"path": "notes.txt", "startLine": 2, "lineCount": 2}))
        as_strings = data(await client.call_tool("read", {"path": "notes.txt", "startLine": "2", "lineCount": "2"}))
        listed = data(await client.call_tool("session_list", {"includeCurrent": "false"}))
        with_current = data(await client.call_tool("session_list", {"includeCurrent": "true"}))
    assert as_strings == as_numbers and "two\nthree" in as_strings["content"] and "four" not in as_strings["content"]
    assert listed["sessions"] == [] and len(with_current["sessions"]) == 1


async def test_a_string_that_is_no_number_is_refused_naming_the_field(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("one\n")
    async with connect(runtime) as client:
        refused = error_text(await client.call_tool("read", {"path": "notes.txt", "startLine": "three"}))
        fraction = error_text(await client.call_tool("read", {"path": "notes.txt", "startLine": "2.5"}))
    assert "startLine" in refused and "integer" in refused
    assert "startLine" in fraction


@pytest.mark.parametrize("mode", ERAS)
async def test_the_instructions_say_so(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        told = client.instructions or ""
    assert 'Numbers and booleans may be given as strings ("3", "true").' in told
