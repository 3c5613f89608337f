"""Custom tools: declared by the user in config.json, answered by a person, checked against the output schema."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import data, error_text
from mcp.client import ClientRequestContext
from test_permissions import answer, cli, client_for

from managed_tools.server.config.data_dir import default_data_dir
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import StartupError, open_runtime
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

WEATHER: dict[str, Any] = {
    "name": "ask_weather",
    "title": "Ask for the weather",
    "description": "A person looks out of the window and reports the weather.",
    "inputSchema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "outputSchema": {
        "type": "object",
        "properties": {"tempC": {"type": "number"}, "sky": {"type": "string", "enum": ["clear", "cloudy"]}},
        "required": ["tempC"],
    },
}


@pytest.fixture
def config(workspace: Path, database_option: str | None) -> ServeConfig:
    data_dir = default_data_dir(workspace.resolve())
    data_dir.mkdir(parents=True)
    (data_dir / "config.json").write_text(json.dumps({"customTools": [WEATHER]}))
    return ServeConfig.build(workspace=workspace, data_dir=None, database=database_option)


@pytest.fixture
async def rt(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as runtime:
        yield runtime


async def test_published_as_custom(rt: Runtime) -> None:
    """As written, `additionalProperties: false` included (its author's contract, which the MCP conformance suite
    checks is published; docs/decisions/portable-schemas.md): an unknown field is refused, naming it."""
    async with client_for(rt) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "ask_weather")
        refused = error_text(await client.call_tool("ask_weather", {"city": "Oslo", "wind": 3}))
    assert (tool.meta or {})["managed-tools/tool"]["ownership"] == "custom"
    assert tool.input_schema == WEATHER["inputSchema"] and tool.output_schema == WEATHER["outputSchema"]
    assert "wind" in refused, refused


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_person_answers_through_elicitation(rt: Runtime, mode: str) -> None:
    forms: list[dict[str, Any]] = []

    async def reply(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        forms.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={"tempC": 21.5, "sky": "clear"})

    async with client_for(rt, mode, elicitation_callback=reply) as client:
        result = data(await client.call_tool("ask_weather", {"city": "Oslo"}))
        bad_args = await client.call_tool("ask_weather", {"city": 3})
    assert result == {"tempC": 21.5, "sky": "clear"}
    assert set(forms[0]["properties"]) == {"tempC", "sky"} and forms[0]["required"] == ["tempC"]
    assert "3 is not of type 'string'" in error_text(bad_args)


async def test_an_answer_that_breaks_the_schema_is_refused(rt: Runtime) -> None:
    async with client_for(rt, "legacy", elicitation_callback=answer("accept", {"tempC": "warm"})) as client:
        result = await client.call_tool("ask_weather", {"city": "Oslo"})
    assert "does not match its output schema" in error_text(result)


async def test_out_of_band_respond(rt: Runtime, config: ServeConfig) -> None:
    async with client_for(rt) as client:
        waiting = await client.call_tool("ask_weather", {"city": "Bergen"})
        request_id = (waiting.meta or {})["managed-tools/requiresAction"]["requestId"]
        assert f"managed-tools respond {request_id} --json" in error_text(waiting)
        not_json = await cli(config, "respond", request_id, "--json", "{tempC: 1}")
        wrong = await cli(config, "respond", request_id, "--json", '{"tempC": "hot"}')
        approve = await cli(config, "approve", request_id)
        ok = await cli(config, "respond", request_id, "--json", '{"tempC": 4, "sky": "cloudy"}')
        result = data(await client.call_tool("ask_weather", {"city": "Bergen"}))
    assert not_json.returncode == 1 and "not valid JSON" in not_json.stderr
    assert wrong.returncode == 1 and "does not match ask_weather's output schema" in wrong.stderr
    assert approve.returncode == 1 and "use `managed-tools respond`" in approve.stderr
    assert ok.returncode == 0, ok.stderr
    assert result == {"tempC": 4, "sky": "cloudy"}


async def test_a_broken_declaration_is_a_startup_error(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    data_dir.mkdir()
    broken = {**WEATHER, "outputSchema": {"type": "object", "properties": {"x": {"type": "nonsense"}}}}
    (data_dir / "config.json").write_text(json.dumps({"customTools": [broken]}))
    with pytest.raises(StartupError, match="not a valid JSON Schema"):
        async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=data_dir)):
            pass
