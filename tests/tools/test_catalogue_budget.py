"""The catalogue budget (docs/decisions/catalogue-budget.md): the published tools/list matches its snapshot,
each tool stays small, the whole model-visible catalogue stays under 32,500 characters, output schemas write each
part once, and the instructions stay under 2 KB."""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator
from support.snapshot_tools import UPDATE, difference, full_catalogue, listing, page_with_current_table, visible_chars

from managed_tools.server.publishing.instructions import MAX_INSTRUCTIONS_BYTES, instructions
from managed_tools.server.publishing.publish import META_DEFAULTS, TOOL_META_KEY, to_mcp_tool
from managed_tools.server.publishing.tool_search import CORE_BUDGET
from managed_tools.tools.catalogue import PURPOSES, build_registry
from managed_tools.tools.discovery.tools import DEFINITIONS as SEARCH_TOOLS
from managed_tools.tools.framework.context.budget import estimated_tokens
from managed_tools.tools.framework.definitions.custom import CustomToolSpec, custom_tool
from managed_tools.tools.framework.definitions.schemas import (
    hoist_repeats,
    inline_single_use,
    lean_output,
    merged_nulls,
    repeated_parts,
)

MAX_DESCRIPTION_BYTES = 2048  # clients cut longer descriptions (Claude Code at 2 KB)
MAX_TOOL_TOKENS = 350  # name + description + input schema, estimated as characters / 4
# names + descriptions + input schemas of the full catalogue: 30,000 until every optional field took null
# (docs/decisions/portable-schemas.md) and `edit` took a list of edits (edit-many.md, hand-off-children-answer.md);
# 33,100 with memory_correct (issue 37 item 4: ~600 characters, its field descriptions already cut)
MAX_CATALOGUE_CHARS = 33_100


def test_tools_list_matches_the_snapshot() -> None:
    found = difference()
    assert not found, found


def test_the_presets_figures_in_the_docs_are_current() -> None:
    """docs/presets.md states each preset's served tool count and tools/list size: measured here, not typed."""
    page, updated = page_with_current_table()
    assert page == updated, f"docs/presets.md's figures are stale; run `{UPDATE}` and commit the page"


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


def test_a_repeat_inside_a_repeat_gets_a_name_of_its_own() -> None:
    """The regression: a repeated part holding another repeated part under the same property name was hoisted
    under one name twice, a definition that referred to itself."""
    inner = {"anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": 31622400}, {"type": "null"}]}
    outer = {"anyOf": [inner, {"type": "string", "description": "long enough to be worth hoisting"}]}
    schema = {"type": "object", "properties": {name: {"properties": {"seconds": outer, "other": inner}}
                                               for name in ("a", "b")}}  # fmt: skip
    hoisted = hoist_repeats(schema)
    defs = hoisted["$defs"]
    assert "Seconds" in defs and all(f'"#/$defs/{name}"' not in json.dumps(body) for name, body in defs.items())


def test_a_definition_used_once_is_written_in_place() -> None:
    """The regression: pydantic gives every nested model a `$defs` entry, so a model used once cost a `$ref` (bytes,
    and a resolver step in every client's check of every result). Shared and recursive definitions stay."""
    node = {"type": "object", "properties": {"n": {"type": "integer"}}}
    loop = {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/Loop"}, {"type": "null"}]}}}
    schema = {
        "type": "object",
        "properties": {"once": {"$ref": "#/$defs/Once"}, "a": {"$ref": "#/$defs/Twice"},
                       "b": {"items": {"$ref": "#/$defs/Twice"}, "type": "array"}, "loop": {"$ref": "#/$defs/Loop"}},
        "$defs": {"Once": node, "Twice": node, "Loop": loop},
    }  # fmt: skip
    placed = inline_single_use(schema)
    assert placed["properties"]["once"] == node and set(placed["$defs"]) == {"Twice", "Loop"}
    for instance, valid in (
        ({"once": {"n": 1}, "loop": {"next": {"next": None}}}, True),
        ({"once": {"n": "1"}}, False),
    ):
        assert (
            Draft202012Validator(placed).is_valid(instance) is valid is Draft202012Validator(schema).is_valid(instance)
        )
    published = [d.output_schema() for d in full_catalogue()]
    assert all(count > 1 for s in published for count in _uses(s).values())


def _uses(schema: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for match in re.findall(r'"\$ref": "#/\$defs/([^"]+)"', json.dumps(schema)):
        counts[match] = counts.get(match, 0) + 1
    return counts


def test_instructions_name_the_toolsets_and_stay_small() -> None:
    """At the largest: every family, and a tool in each of the user's toolsets."""
    spec = {"name": "ask_a_person", "description": "A person answers.", "outputSchema": {"type": "object"}}
    base = full_catalogue()[0]
    upstream = base.model_copy(update={"name": "upstream__describe", "ownership": "mcp"})
    extension = base.model_copy(update={"name": "my_describe"})
    everything = build_registry([custom_tool(CustomToolSpec.model_validate(spec)), upstream], extensions=[extension])
    text = instructions(everything, "sqlite")
    assert len(text.encode()) < MAX_INSTRUCTIONS_BYTES, len(text.encode())
    assert all(f"{name} (" in text for name in PURPOSES)
    assert "Start with environment_describe then session_get_snapshot" in text


# The whole tools/list answer as sent (compact JSON, every tool of the full catalogue with all its parts): 169,553
# bytes before output schemas, annotations and _meta were made lean, 142,264 after (docs/decisions/lean-catalogue.md).
# Issue 24's goal of 60,000 needs smaller results or fewer tools per connection; the record says why (an SDK client
# checks each output schema alone, so no `$defs` can be shared across tools). 138,667 once every definition used
# only once was written in place (`inline_single_use`). 140,444 with `session_answer_parent`, a multi-edit `edit`
# and nullable optional fields (issue 38). 126,855 once the lean results' schemas were in (issue 38 item 15);
# 122,856 once a nullable enum or object took null itself and enums lost their type (issue 41 item 4,
# docs/decisions/wire-small.md, which says why 60,000 is not reached). 125,529 with memory_correct and the
# learnings' state and notices (issue 37 item 4).
MAX_TOOLS_LIST_BYTES = 126_000


def tools_list_bytes() -> int:
    return len(json.dumps({"tools": listing(full_catalogue())}, separators=(",", ":"), ensure_ascii=False).encode())


def test_tools_list_fits_its_byte_budget() -> None:
    size = tools_list_bytes()
    assert size <= MAX_TOOLS_LIST_BYTES, f"tools/list is {size:,} bytes"


def properties_and_required(node: Any, found: set[tuple[str, bool]] | None = None) -> set[tuple[str, bool]]:
    """Every property named anywhere in a schema, and whether it is required where it is named."""
    found = set() if found is None else found
    if isinstance(node, list):
        for item in node:
            properties_and_required(item, found)
    elif isinstance(node, dict):
        required = set(node.get("required", []))
        for name, sub in (node.get("properties") or {}).items():
            found.add((name, name in required))
            properties_and_required(sub, found)
        for key, value in node.items():
            if key != "properties" and key not in ("enum", "const", "default", "examples"):
                properties_and_required(value, found)
    return found


def keywords(node: Any) -> set[str]:
    """The schema keywords used anywhere in a schema (not the names of its properties or definitions)."""
    if isinstance(node, list):
        return set().union(*(keywords(item) for item in node))
    if not isinstance(node, dict):
        return set()
    found = set(node)
    for key, value in node.items():
        if key in ("properties", "$defs"):
            found |= set().union(*(keywords(sub) for sub in value.values()))
        elif key not in ("enum", "const", "default", "examples"):
            found |= keywords(value)
    return found


def test_lean_output_schemas_keep_every_field_and_drop_the_noise() -> None:
    """Each published output schema names every field pydantic does, required where pydantic says so; it carries
    no description and no `additionalProperties: false`; a nullable primitive is `type: [T, "null"]`."""
    for d in full_catalogue():
        if d.ownership != "managed":
            continue
        full = d.output_model.model_json_schema(by_alias=True, mode="serialization")
        lean = d.output_schema()
        assert properties_and_required(lean) == properties_and_required(full), d.name
        assert "description" not in keywords(lean), d.name
        text = json.dumps(lean)
        assert '"additionalProperties": false' not in text and '{"type": "string"}, {"type": "null"}' not in text


def test_a_nullable_primitive_validates_the_same() -> None:
    """`type: [T, "null"]` accepts what `anyOf` of T and null did, and refuses what it refused. (What the tools
    return is checked against the published schemas by every test that calls them: the SDK client validates.)"""
    schema = {"type": "object", "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    lean = lean_output(schema)
    assert lean == {"type": "object", "properties": {"x": {"type": ["integer", "null"]}}}
    for instance, valid in (({"x": None}, True), ({"x": 3}, True), ({"x": "3"}, False)):
        assert Draft202012Validator(lean).is_valid(instance) is valid is Draft202012Validator(schema).is_valid(instance)


def test_a_nullable_enum_or_object_validates_the_same() -> None:
    """An enum takes null as a value and loses the `type` its values say; a nullable object is an object schema of
    `type: ["object", "null"]` (`properties` and `required` do not apply to null); each refuses what it refused."""
    status = {"anyOf": [{"enum": ["open", "done"], "type": "string"}, {"type": "null"}]}
    shell = {"properties": {"cwd": {"type": "string"}}, "required": ["cwd"], "type": "object"}
    schema = {"type": "object", "properties": {"s": status, "e": {"enum": [1, 2], "type": "integer"},
                                               "o": {"anyOf": [shell, {"type": "null"}], "default": None}}}  # fmt: skip
    lean = merged_nulls(lean_output(schema))
    assert lean["properties"] == {
        "s": {"enum": ["open", "done", None]},
        "e": {"enum": [1, 2]},
        "o": {**shell, "type": ["object", "null"], "default": None},
    }
    for instance, valid in (
        ({"s": None, "e": 1, "o": None}, True),
        ({"s": "done", "o": {"cwd": "/"}}, True),
        ({"s": "gone"}, False),
        ({"e": True}, False),
        ({"e": 1.5}, False),
        ({"o": {}}, False),
        ({"o": "x"}, False),
        ({"s": 1}, False),
    ):
        assert Draft202012Validator(lean).is_valid(instance) is valid is Draft202012Validator(schema).is_valid(instance)


def subschemas(node: Any) -> list[dict[str, Any]]:
    """Every (sub)schema of a schema, itself first; literal values (an enum's, a default) are not schemas."""
    if isinstance(node, list):
        return [found for item in node for found in subschemas(item)]
    if not isinstance(node, dict):
        return []
    inner = [sub for key, value in node.items() if key not in ("enum", "const", "default", "examples")
             for sub in (value.values() if key in ("properties", "$defs") else [value])]  # fmt: skip
    return [node, *subschemas(inner)]


def test_published_output_schemas_write_null_into_the_schema_it_completes() -> None:
    """The regression guard for the rewrite: no published output schema keeps an `anyOf` of null and an enum or a
    plain typed schema, or an enum beside a `type` (the values say it)."""
    left: dict[str, list[dict[str, Any]]] = {}
    for d in full_catalogue():
        if d.ownership != "managed":
            continue
        for node in subschemas(d.output_schema()):
            options = node.get("anyOf", [])
            others = [o for o in options if o != {"type": "null"}]
            plain = len(options) == 2 and len(others) == 1 and not {"$ref", "anyOf", "allOf", "oneOf"} & set(others[0])
            if plain or ("enum" in node and "type" in node):
                left.setdefault(d.name, []).append(node)
    assert not left, left


def test_annotations_and_meta_say_each_thing_once() -> None:
    """No title in annotations (the tool's own), no hint the protocol calls meaningless, no default in _meta."""
    tools = listing(full_catalogue())
    assert all("title" not in t["annotations"] for t in tools)
    read_only = [t for t in tools if t["annotations"]["readOnlyHint"]]
    assert read_only and all(set(t["annotations"]) == {"readOnlyHint", "openWorldHint"} for t in read_only)
    shell = next(t for t in tools if t["name"] == "shell_run")["annotations"]
    assert shell == {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True}
    metas = [to_mcp_tool(d).meta or {} for d in full_catalogue()]
    for meta in (m[TOOL_META_KEY] for m in metas):
        assert all(meta.get(key) != value for key, value in META_DEFAULTS.items())
        assert meta.get("examples") != [] and "readOnly" not in meta and "destructive" not in meta


MAX_SEARCH_PROFILE_CHARS = 6_000  # the search profile's list at connect (docs/tool-search.md)


def test_the_search_profile_fits_its_budget_at_connect() -> None:
    """Whatever the core turns out to be (it follows the recorded calls), it and the three search tools fit."""
    own = sum(visible_chars(d) for d in SEARCH_TOOLS)
    assert own + CORE_BUDGET <= MAX_SEARCH_PROFILE_CHARS, own
