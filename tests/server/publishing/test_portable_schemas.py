"""Schemas every client takes (issue 38 items 10-14; docs/decisions/portable-schemas.md): the real conversion code of
openai-agents (strict), google-genai and pydantic-ai (OpenAI strict, Gemini) over the `full` catalogue as a real
client lists it, with no tool refused and none changed in meaning; a strict-converted call (null for every optional
field) runs; cross-field rules are refused naming the real fields; the approval form takes a typed answer."""

from __future__ import annotations

import copy
import logging
import os
import re
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from agents.exceptions import UserError
from agents.mcp import MCPServerStdio, MCPUtil
from agents.strict_schema import ensure_strict_json_schema
from conftest import ERAS, Connect, data, error_text
from google.genai import _mcp_utils as genai_mcp
from google.genai.types import JSONSchema, Schema
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.client import ClientRequestContext
from pydantic_ai.profiles.google import GoogleJsonSchemaTransformer
from pydantic_ai.profiles.openai import OpenAIJsonSchemaTransformer

from managed_tools.server.config.serve_config import Selecting, ServeConfig
from managed_tools.server.consent.consent import CONFIRM_SCHEMA
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.framework.calls.arguments import ArgumentError, parse_call
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

JsonSchema = dict[str, Any]


@pytest.fixture
def config(workspace: Path) -> ServeConfig:
    return ServeConfig.build(
        workspace=workspace,
        data_dir=None,
        selection=Selecting(preset="full"),
        tool_modules=("support.probe_tools",),
    )


@pytest.fixture
async def listed(runtime: Runtime, connect: Connect) -> list[types.Tool]:
    async with connect(runtime) as client:
        tools = (await client.list_tools()).tools
    assert len(tools) == len(runtime.registry) > 60
    return tools


# ---- what a strict client sends ---------------------------------------------------------------------------------


def options(schema: JsonSchema) -> list[JsonSchema]:
    return [o for o in schema.get("anyOf", [schema]) if o.get("type") != "null"]


def minimal(schema: JsonSchema) -> Any:
    """The smallest value of a schema: the arguments a tool needs and nothing else."""
    schema = options(schema)[0]
    if "enum" in schema:
        return schema["enum"][0]
    kind = next(t for t in ([schema["type"]] if isinstance(schema["type"], str) else schema["type"]) if t != "null")
    if kind == "object":
        return {name: minimal(schema["properties"][name]) for name in schema.get("required", [])}
    if kind == "array":
        return [minimal(schema["items"]) for _ in range(schema.get("minItems", 0))]
    if kind == "string":
        if schema.get("format") == "date-time":
            return "2030-01-01T00:00:00Z"
        # the patterns the catalogue uses: ids of 16 and 64 hex digits, non-blank text
        return next(c for c in ("x", "0" * 16, "0" * 64) if re.search(schema.get("pattern", ""), c))
    if kind in ("integer", "number"):
        return max(schema.get("minimum", 1), 1)
    return False


def with_nulls(schema: JsonSchema, value: Any) -> Any:
    """The value as a model under OpenAI's strict rules sends it: every field of every object, null where it would
    have left one out."""
    for option in options(schema):
        if isinstance(value, dict) and "properties" in option:
            return {name: with_nulls(sub, value[name]) if name in value else None
                    for name, sub in option["properties"].items()}  # fmt: skip
        if isinstance(value, list) and "items" in option:
            return [with_nulls(option["items"], item) for item in value]
    return value


def calls(tool: types.Tool, runtime: Runtime) -> list[dict[str, Any]]:
    """Arguments to try: the tool's worked examples, or the smallest call its schema allows."""
    definition = runtime.registry.get(tool.name)
    assert definition is not None
    return [dict(example.input) for example in definition.examples] or [minimal(tool.input_schema)]


def parsed(runtime: Runtime, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
    definition = runtime.registry.get(name)
    assert definition is not None
    try:
        return "ok", parse_call(definition, arguments)[1]
    except ArgumentError as exc:
        return "refused", str(exc)


# ---- what a conversion keeps ------------------------------------------------------------------------------------


def shape(schema: Any, path: str = "") -> set[tuple[str, bool]]:
    """Every property at every depth, and whether it is required there (google-genai spells anyOf `any_of`)."""
    found: set[tuple[str, bool]] = set()
    if not isinstance(schema, dict):
        return found
    required = set(schema.get("required") or ())
    for name, sub in (schema.get("properties") or {}).items():
        found.add((f"{path}.{name}", name in required))
        found |= shape(sub, f"{path}.{name}")
    for key in ("items", "anyOf", "any_of"):
        for sub in schema.get(key) or [] if key != "items" else [schema.get("items")]:
            found |= shape(sub, path)
    return found


def names(schema: Any) -> set[str]:
    return {name for name, _ in shape(schema)}


def enums(schema: Any) -> list[list[Any]]:
    if isinstance(schema, list):
        return [found for item in schema for found in enums(item)]
    if not isinstance(schema, dict):
        return []
    own = [[v for v in schema["enum"] if v is not None]] if isinstance(schema.get("enum"), list) else []
    return own + [found for key, value in schema.items() if key != "enum" for found in enums(value)]


CONVERTERS = ("openai", "agents", "pydantic_ai", "google")


@contextmanager
def reported() -> Iterator[list[str]]:
    """What a converter says while it works, as a warning or a log line (what it drops, or gives up on)."""
    said: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    handler.addFilter(lambda record: record.name.startswith(CONVERTERS))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield said
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    # Only what the converters warn (from their code, or pointing at this file as their caller): a ResourceWarning of
    # an earlier test's garbage, collected meanwhile, is not theirs (the full suite failed on one).
    said.extend(str(warning.message) for warning in caught if from_converter(warning.filename))


def from_converter(filename: str) -> bool:
    return filename == __file__ or any(f"{os.sep}{package}{os.sep}" in filename for package in CONVERTERS)


def dropped(schema: Any, kept: Any) -> set[str]:
    """The keywords a conversion left out, at any depth."""
    if not isinstance(schema, dict) or not isinstance(kept, dict):
        return set()
    found = set(schema) - set(kept)
    for key in set(schema) & set(kept):
        value = schema[key]
        if key in ("properties", "$defs"):
            found |= {k for name in value for k in dropped(value[name], kept[key].get(name))}
        elif key == "items":
            found |= dropped(value, kept[key])
        elif key == "anyOf":
            found |= {k for a, b in zip(value, kept[key], strict=True) for k in dropped(a, b)}
    return found


# ---- the rule itself --------------------------------------------------------------------------------------------


def keys_and_values(node: Any) -> list[tuple[str, Any]]:
    if isinstance(node, list):
        return [found for item in node for found in keys_and_values(item)]
    if not isinstance(node, dict):
        return []
    found = []
    for key, value in node.items():
        found.append((key, value))
        if key not in ("default", "enum", "examples"):
            found += keys_and_values(list(value.values()) if key in ("properties", "$defs") else value)
    return found


async def test_every_published_schema_follows_the_portable_rule(listed: list[types.Tool]) -> None:
    for tool in listed:
        for schema in filter(None, (tool.input_schema, tool.output_schema)):
            Draft202012Validator.check_schema(schema)
            used = keys_and_values(schema)
            assert not [k for k, v in used if k == "const" or (k == "additionalProperties" and isinstance(v, bool))]
    read = next(t for t in listed if t.name == "read").input_schema
    assert read["properties"]["maxChars"]["type"] == ["integer", "null"]


async def test_a_strict_call_means_what_the_call_without_nulls_means(
    runtime: Runtime, listed: list[types.Tool]
) -> None:
    """For every tool: null for every optional field, at every depth, is accepted exactly when leaving the fields
    out is, and parses to the same arguments; the strict form is valid against the published schema."""
    accepted = 0
    for tool in listed:
        for arguments in calls(tool, runtime):
            strict = with_nulls(tool.input_schema, arguments)
            assert Draft202012Validator(tool.input_schema).is_valid(strict), (tool.name, strict)
            assert parsed(runtime, tool.name, strict) == parsed(runtime, tool.name, arguments), tool.name
            accepted += parsed(runtime, tool.name, arguments)[0] == "ok"
    assert accepted > len(listed)  # the comparison is of real calls, not of two refusals


# ---- the three clients' conversions -----------------------------------------------------------------------------


async def test_openai_agents_converts_every_tool_strictly(runtime: Runtime, listed: list[types.Tool]) -> None:
    """Its strict conversion keeps every field (all required now, the optional ones nullable) and the strict form
    of each call is valid against it. Through its MCP path (MCPUtil.to_function_tool), every tool that takes
    arguments is served strict; the ones that take none stay non-strict there, since it wants their empty object
    closed by `additionalProperties: false`, which google-genai cannot read (docs/decisions/portable-schemas.md):
    a model can only call them with `{}` either way."""
    server = MCPServerStdio(params={"command": "true"}, name="managed-tools")
    with reported() as said:
        for tool in listed:
            _convert_for_openai_agents(runtime, server, tool)
    no_arguments = [t for t in listed if not t.input_schema.get("properties")]
    assert no_arguments and said == ["Error converting MCP schema to strict mode"] * len(no_arguments)
    for tool in no_arguments:
        with pytest.raises(UserError, match="permits undeclared properties"):
            ensure_strict_json_schema(copy.deepcopy(tool.input_schema), _reject_open_objects=True)


def _convert_for_openai_agents(runtime: Runtime, server: MCPServerStdio, tool: types.Tool) -> None:
    strict = ensure_strict_json_schema(copy.deepcopy(tool.input_schema))
    assert names(strict) == names(tool.input_schema), tool.name
    assert all(required for _, required in shape(strict)), tool.name
    assert enums(strict) == enums(tool.input_schema), tool.name
    for arguments in calls(tool, runtime):
        assert Draft202012Validator(strict).is_valid(with_nulls(tool.input_schema, arguments)), tool.name
    function = MCPUtil.to_function_tool(tool, server, convert_schemas_to_strict=True)
    assert function.strict_json_schema is bool(tool.input_schema.get("properties")), tool.name


async def test_google_genai_converts_the_whole_list(listed: list[types.Tool]) -> None:
    """The installed google-genai's conversion of an MCP tool list (what its MCP session support runs): every tool,
    each with its fields, which are required and their values."""
    with reported() as said:
        converted = genai_mcp.mcp_to_gemini_tools(listed)
        for tool in listed:  # and nothing it kept is beyond Gemini's schema
            supported = genai_mcp._filter_to_supported_schema(copy.deepcopy(tool.input_schema))
            Schema.from_json_schema(json_schema=JSONSchema(**supported), raise_error_on_unsupported_field=True)
            # Its filter keeps snake_case names only, so the camelCase bounds go; the server still refuses
            # what breaks them, naming the field.
            assert dropped(tool.input_schema, supported) <= {"maxLength", "minLength", "maxItems", "minItems"}
    assert all(line.startswith("\nNote: Conversion of fields that are not included") for line in said), said  # once
    assert len(converted) == len(listed)
    for tool, gemini in zip(listed, converted, strict=True):
        declaration = (gemini.function_declarations or [])[0]
        assert declaration.name == tool.name and declaration.parameters is not None
        parameters = declaration.parameters.model_dump(mode="json", exclude_none=True)
        assert shape(parameters) == shape(tool.input_schema), tool.name
        assert enums(parameters) == enums(tool.input_schema), tool.name


async def test_pydantic_ai_transforms_every_tool(runtime: Runtime, listed: list[types.Tool]) -> None:
    """pydantic-ai's OpenAI strict transformer (every field required) and its Gemini transformer keep every field;
    the strict form of each call is valid against the strict result."""
    for tool in listed:
        with reported() as said:
            openai = OpenAIJsonSchemaTransformer(copy.deepcopy(tool.input_schema), strict=True).walk()
            gemini = GoogleJsonSchemaTransformer(copy.deepcopy(tool.input_schema)).walk()
        assert not said, tool.name
        assert names(openai) == names(tool.input_schema), tool.name
        for arguments in calls(tool, runtime):
            assert Draft202012Validator(openai).is_valid(with_nulls(tool.input_schema, arguments)), tool.name
        assert shape(gemini) == shape(tool.input_schema), tool.name
        assert enums(gemini) == enums(tool.input_schema), tool.name


# ---- through a real client, both eras ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_strict_calls_of_read_and_session_schedule_wake_run(
    runtime: Runtime, connect: Connect, workspace: Path, mode: str
) -> None:
    (workspace / "notes.txt").write_text("one\ntwo\n")
    async with connect(runtime, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        read = with_nulls(tools["read"].input_schema, {"path": "notes.txt"})
        assert read == {"path": "notes.txt", "maxChars": None, "startLine": None, "lineCount": None, "tailLines": None}
        assert "two" in data(await client.call_tool("read", read))["content"]
        wake = with_nulls(tools["session_schedule_wake"].input_schema, {"reason": "check the build", "inSeconds": 60})
        assert wake["dueAt"] is None and wake["priority"] is None
        scheduled = data(await client.call_tool("session_schedule_wake", wake))["wake"]
        assert scheduled["priority"] == "normal"  # null is the default, as if left out


@pytest.mark.parametrize("mode", ERAS)
async def test_cross_field_rules_name_the_real_fields(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode=mode) as client:
        for arguments in ({"reason": "r"}, {"reason": "r", "inSeconds": 5, "dueAt": "2030-01-01T00:00:00Z"}):
            text = error_text(await client.call_tool("session_schedule_wake", arguments))
            assert "exactly one of dueAt and inSeconds" in text and "'arguments'" not in text, text
        await client.call_tool("planning_setup_plan", {"steps": ["one"]})
        text = error_text(await client.call_tool("planning_update_step", {"stepId": 1, "title": None}))
        assert "give title, status or both" in text and "'arguments'" not in text, text


@pytest.mark.parametrize("mode", ERAS)
async def test_a_free_form_object_travels_as_json_text(
    runtime: Runtime, connect: Connect, workspace: Path, mode: str
) -> None:
    """sandbox_execute's `input` and permissions_check's `toolArgs` are published as JSON text; the object the
    reference sends is still taken, and text that is no object is refused naming the field."""
    (workspace / "a.txt").write_text("alpha\n")
    async with connect(runtime, mode=mode) as client:
        for given in ('{"path": "a.txt"}', {"path": "a.txt"}):
            result = data(await client.call_tool("sandbox_execute", {"name": "read_text", "input": given}))
            assert "alpha" in str(result["output"])
        checked = data(await client.call_tool("permissions_check", {"toolName": "read", "toolArgs": '{"path": 1}'}))
        assert "path" in str(checked)
        for bad in ("not json", "[1, 2]", "[" * 100_000):  # the last: one clear refusal, not a RecursionError
            text = error_text(await client.call_tool("sandbox_execute", {"name": "read_text", "input": bad}))
            assert "field 'input'" in text, text


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_call_takes_the_arguments_as_json_text(workspace: Path, mode: str) -> None:
    """The search profile's tools_call, which the full preset does not serve."""
    (workspace / "a.txt").write_text("alpha\n")
    config = ServeConfig.build(workspace=workspace, data_dir=None, tool_search=True)
    async with open_runtime(config) as runtime, Client(build_server(runtime, transport="memory"), mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["tools_call"].input_schema["properties"]["arguments"]["type"] == ["string", "null"]
        called = data(await client.call_tool("tools_call", {"name": "read", "arguments": '{"path": "a.txt"}'}))
    assert "alpha" in str(called["output"])


# ---- the approval form ------------------------------------------------------------------------------------------


def typed_answer(schema: JsonSchema) -> dict[str, Any]:
    """What a client answering with a typed form sends (FastMCP's elicitation to a dataclass): the person's yes, and
    every optional field at the schema's default, null where there is none."""
    properties: dict[str, JsonSchema] = schema["properties"]
    return {name: True if name == "approve" else prop.get("default") for name, prop in properties.items()}


def test_every_optional_field_of_the_approval_form_has_a_default() -> None:
    optional = set(CONFIRM_SCHEMA["properties"]) - set(CONFIRM_SCHEMA["required"])
    assert optional and all("default" in CONFIRM_SCHEMA["properties"][name] for name in optional)
    assert Draft202012Validator(CONFIRM_SCHEMA).is_valid(typed_answer(CONFIRM_SCHEMA))


@pytest.mark.parametrize("mode", ERAS)
async def test_a_typed_answer_to_the_approval_form_approves(runtime: Runtime, mode: str) -> None:
    answered: list[dict[str, Any]] = []

    async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        content = typed_answer(params.requested_schema)
        assert Draft202012Validator(params.requested_schema).is_valid(content)  # as a checking client does
        answered.append(content)
        return types.ElicitResult(action="accept", content=content)

    server = build_server(runtime, transport="memory", approval_wait_seconds=5.0)
    async with Client(server, mode=mode, elicitation_callback=on_elicit) as client:
        assert data(await client.call_tool("probe_danger", {"label": "typed"})) == {"rows": 1}
    assert answered and answered[0]["note"] == ""


@pytest.fixture
async def runtime(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as rt:
        yield rt
