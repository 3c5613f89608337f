"""The catalogue budget (docs/decisions/catalogue-budget.md): the published tools/list matches its snapshot,
each tool stays small, the whole model-visible catalogue stays under 30,000 characters, output schemas write each
part once, and the instructions stay under 2 KB."""

from __future__ import annotations

import json

from snapshot_tools import difference, full_catalogue

from managed_tools.server.instructions import MAX_INSTRUCTIONS_BYTES, instructions
from managed_tools.tools.catalogue import PURPOSES, build_registry
from managed_tools.tools.environment.setup import estimated_tokens
from managed_tools.tools.framework.custom import CustomToolSpec, custom_tool
from managed_tools.tools.framework.definition import ToolDefinition, repeated_parts

MAX_DESCRIPTION_BYTES = 2048  # clients cut longer descriptions (Claude Code at 2 KB)
MAX_TOOL_TOKENS = 350  # name + description + input schema, estimated as characters / 4
MAX_CATALOGUE_CHARS = 30_000  # names + descriptions + input schemas of the full catalogue


def visible_chars(definition: ToolDefinition) -> int:
    """What a model reads of a tool: its name, its description and its input schema as compact JSON."""
    schema = json.dumps(definition.input_schema(), separators=(",", ":"), ensure_ascii=False)
    return len(definition.name) + len(definition.description) + len(schema)


def test_tools_list_matches_the_snapshot() -> None:
    found = difference()
    assert not found, found


def test_each_tool_fits_its_budget() -> None:
    over = [
        f"{d.name}: {len(d.description.encode())} description bytes, ~{estimated_tokens(visible_chars(d))} tokens"
        for d in full_catalogue()
        if len(d.description.encode()) >= MAX_DESCRIPTION_BYTES or estimated_tokens(visible_chars(d)) > MAX_TOOL_TOKENS
    ]
    assert not over, f"over {MAX_DESCRIPTION_BYTES} bytes or {MAX_TOOL_TOKENS} estimated tokens: {over}"


def test_the_whole_catalogue_fits_its_budget() -> None:
    total = sum(visible_chars(d) for d in full_catalogue())
    assert total < MAX_CATALOGUE_CHARS, f"the model-visible catalogue is {total} characters"


def test_output_schemas_write_each_part_once() -> None:
    repeated = {d.name: repeated_parts(d.output_schema()) for d in full_catalogue()}
    assert not {name: parts for name, parts in repeated.items() if parts}


def test_repeated_parts_are_hoisted_into_defs() -> None:
    """The regression: two models sharing a Literal wrote its enum out twice in one output schema."""
    schema = next(d for d in full_catalogue() if d.name == "session_get_snapshot").output_schema()
    text = json.dumps(schema)
    assert text.count('"not_ready", "uncertain"') == 1 and "#/$defs/" in text


def test_instructions_name_the_toolsets_and_stay_small() -> None:
    """At the largest: every family, and a tool in each of the user's toolsets."""
    spec = {"name": "ask_a_person", "description": "A person answers.", "outputSchema": {"type": "object"}}
    base = full_catalogue()[0]
    upstream = base.model_copy(update={"name": "upstream__describe", "ownership": "mcp"})
    extension = base.model_copy(update={"name": "my_describe"})
    everything = build_registry([custom_tool(CustomToolSpec.model_validate(spec)), upstream], extensions=[extension])
    text = instructions(everything)
    assert len(text.encode()) < MAX_INSTRUCTIONS_BYTES, len(text.encode())
    assert all(f"{name} (" in text for name in PURPOSES)
    assert "Start with environment_describe then session_get_snapshot" in text
