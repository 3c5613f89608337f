"""Compact results (`serve --result-format compact`, issue 29 part 2): list-shaped results are written for the model
as one header line and one line per row; structuredContent is the same as in JSON form. Through a real client in
both protocol eras."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ERAS
from mcp import Client

from managed_tools.server.config.data_dir import ConfigError
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.framework.wire.compact import ResultFormat, compact_text

pytestmark = pytest.mark.anyio


def test_a_list_is_a_header_and_one_line_per_row() -> None:
    structured = {"hits": [{"name": "a", "score": 1.5}, {"name": "b|c", "note": "two\nlines"}], "query": "q"}
    assert compact_text(structured) == "hits[2] query=q: name | score | note\na | 1.5 | \nb\\|c |  | two\\nlines"
    assert compact_text({"matches": ["x.py", "y.py"], "truncated": False}) == "matches[2] truncated=false:\nx.py\ny.py"
    assert compact_text({"title": "no list"}) is None
    paths = {"matches": ["/workspace/src/a.py", "/workspace/src/b/c.py"]}
    assert compact_text(paths) == "matches[2] prefix=/workspace/src/:\na.py\nb/c.py"


@pytest.mark.parametrize("mode", ERAS)
async def test_the_model_reads_rows_and_the_client_gets_the_same_structure(workspace: Path, mode: str) -> None:
    for name in ("a.py", "b.py"):
        (workspace / name).write_text("x")
    seen = {}
    forms: tuple[ResultFormat, ...] = ("json", "compact")
    for form in forms:
        config = ServeConfig.build(workspace=workspace, data_dir=None, result_format=form)
        async with open_runtime(config) as runtime:
            server = build_server(runtime, transport="memory")
            async with Client(server, mode=mode) as client:
                seen[form] = (
                    await client.call_tool("glob", {"pattern": "*.py"}),
                    await client.call_tool("outcome_read", {}),
                )
    (json_glob, _), (compact_glob, compact_read) = seen["json"], seen["compact"]
    assert json_glob.structured_content == compact_glob.structured_content
    text = compact_glob.content[0].text  # type: ignore[union-attr]
    assert text.splitlines()[1:3] == ["a.py", "b.py"] and "[2]" in text.splitlines()[0]
    assert json.loads(json_glob.content[0].text) == json_glob.structured_content  # type: ignore[union-attr]
    no_list = compact_read.content[0].text  # type: ignore[union-attr]
    assert json.loads(no_list) == compact_read.structured_content  # no list: JSON as before


def test_config_json_chooses_it_and_a_typo_is_one_clear_error(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.json").write_text(json.dumps({"resultFormat": "compact", "toolSearch": True}))
    config = ServeConfig.build(workspace=workspace, data_dir=data_dir)
    assert config.result_format == "compact" and config.tool_search
    (data_dir / "config.json").write_text(json.dumps({"resultFormat": "toon"}))
    with pytest.raises(ConfigError, match="resultFormat"):
        ServeConfig.build(workspace=workspace, data_dir=data_dir)


@pytest.mark.parametrize("mode", ERAS)
async def test_one_call_asks_for_the_compact_form(workspace: Path, mode: str) -> None:
    for name in ("a.py", "b.py"):
        (workspace / name).write_text("x")
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    async with open_runtime(config) as runtime, Client(build_server(runtime, transport="memory"), mode=mode) as client:
        plain = await client.call_tool("glob", {"pattern": "*.py"})
        compact = await client.call_tool("glob", {"pattern": "*.py", "format": "compact"})
        listed = await client.call_tool("session_list", {"format": "compact"})
        wrong = await client.call_tool("glob", {"pattern": "*.py", "format": "yaml"})
    assert json.loads(plain.content[0].text) == plain.structured_content  # type: ignore[union-attr]
    assert compact.structured_content == plain.structured_content
    assert compact.content[0].text.splitlines()[1:3] == ["a.py", "b.py"]  # type: ignore[union-attr]
    assert listed.content[0].text.startswith("sessions[1]")  # type: ignore[union-attr]
    assert wrong.is_error and "format" in wrong.content[0].text  # type: ignore[union-attr]
