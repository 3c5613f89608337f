"""A model's published form: the JSON Schema a tool's input or output model is published as, built from the model
by pydantic and then cleaned (titles and noise dropped, refusals pydantic states twice dropped, repeated parts
hoisted into `$defs`, single-use ones put back in place). Apart from definition.py so that published.py, which
writes these schemas into the package, and definition.py, which reads them back, both build on it without importing
each other."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from managed_tools.tools.framework.wire.models import Arguments, WireModel


def built_input_schema(model: type[Arguments]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True)
    written = _verbatim(model)
    published: dict[str, Any] = portable(
        schema if written else _nullable_optionals(_without_refusals(_clean_schema(inline_single_use(schema)))),
        as_written=written,
    )
    return published


def built_output_schema(model: type[WireModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="serialization")
    written = _verbatim(model)
    published: dict[str, Any] = portable(
        schema if written else merged_nulls(inline_single_use(hoist_repeats(lean_output(schema)))), as_written=written
    )
    return published


def _verbatim(model: type[BaseModel]) -> bool:
    """A model that stands for a schema someone wrote (a custom tool's) is published as written: its titles
    are labels a person reads in a form, not names pydantic generated."""
    return bool(getattr(model, "VERBATIM_SCHEMA", False))


def _clean_schema(node: Any, *, output: bool = False) -> Any:
    """Drop the generated `title` keywords: they repeat the property names and bloat tools/list. An output
    schema (`output`) also loses what a client gains nothing from (docs/decisions/lean-catalogue.md): a field's
    description belongs in the tool's description or nowhere; our own models never add a field, so
    `additionalProperties: false` only repeats the property list; and a nullable primitive is `type: [T, "null"]`
    rather than `anyOf` of two schemas (the same instances validate). Together: 14 KB of 108 KB of output schemas."""
    if isinstance(node, list):
        return [_clean_schema(item, output=output) for item in node]
    if not isinstance(node, dict):
        return node
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if _noise(key, value, output=output):
            continue
        if key in ("default", "const", "enum", "examples"):
            cleaned[key] = value
        elif key in ("properties", "$defs"):
            cleaned[key] = {name: _clean_schema(sub, output=output) for name, sub in value.items()}
        else:
            cleaned[key] = _clean_schema(value, output=output)
    options = cleaned.get("anyOf")
    if output and isinstance(options, list) and len(options) == 2 and NULL in options:
        other = next(option for option in options if option != NULL)
        if set(other) == {"type"} and isinstance(other["type"], str):
            del cleaned["anyOf"]
            cleaned["type"] = [other["type"], "null"]
    return cleaned


def merged_nulls(node: Any) -> Any:
    """An output schema with each `anyOf` of one schema and null written as that schema taking null, and each enum
    or `const` without the `type` its values already say: the same instances validate (docs/decisions/
    wire-small.md). A plain typed schema takes `type: [T, "null"]` (its type's own keywords, `properties` or
    `minimum`, do not apply to null), an enum takes null as one more value. Run after `hoist_repeats`, so that an
    enum used both ways stays one definition."""
    if isinstance(node, list):
        return [merged_nulls(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = _subschemas_mapped(node, merged_nulls)
    options = node.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and NULL in options:
        other = next(option for option in options if option != NULL)
        rest = {key: value for key, value in node.items() if key != "anyOf"}
        if "enum" in other and set(other) <= {"enum", "type"} and not {"enum", "type"} & set(rest):
            kind = {"type": [*_types(other["type"]), "null"]} if "type" in other else {}
            node = {**rest, "enum": [*other["enum"], None], **kind}
        elif isinstance(other.get("type"), str) and not NOT_PLAIN & set(other) and not set(other) & set(rest):
            node = {**other, "type": [other["type"], "null"], **rest}
    values = node["enum"] if "enum" in node else [node["const"]] if "const" in node else None
    if values is not None and "type" in node and all(_json_type(value) in _types(node["type"]) for value in values):
        node = {key: value for key, value in node.items() if key != "type"}
    return node


def _subschemas_mapped(node: dict[str, Any], step: Callable[[Any], Any]) -> dict[str, Any]:
    """`node` with `step` applied to each of its subschemas: literal values (an enum's, a default) kept as they are,
    properties and definitions each by name."""
    return {
        key: value if key in ("default", "const", "enum", "examples")
        else {name: step(sub) for name, sub in value.items()} if key in ("properties", "$defs")
        else step(value)
        for key, value in node.items()
    }  # fmt: skip


def _types(kind: Any) -> list[str]:
    return [kind] if isinstance(kind, str) else list(kind)


def _json_type(value: Any) -> str:
    """The JSON type a value has, as JSON Schema's `type` names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def _noise(key: str, value: Any, *, output: bool) -> bool:
    if key == "title" or (output and key == "description"):
        return isinstance(value, str)
    return output and key == "additionalProperties" and value is False


def lean_output(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema as published: without titles and the output noise (`_clean_schema`)."""
    cleaned: dict[str, Any] = _clean_schema(schema, output=True)
    return cleaned


NULL = {"type": "null"}
# Keywords that make a schema more than "a value of this type, so constrained": `type: [T, "null"]` beside them would
# not let null through (an enum without null) or would mean something else.
NOT_PLAIN = frozenset({"enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not"})


def _nullable_optionals(node: Any) -> Any:
    """Every optional field of every object takes `null` (the model drops it: tools/framework/wire/models.py), as
    OpenAI's strict conversion needs: it makes every field required and a model sends `null` for the ones it leaves
    out. A plain type becomes `type: [T, "null"]` (a type's own constraints apply to it alone), anything else
    `anyOf` of itself and null; a `default: null` says nothing `null` does not."""
    if isinstance(node, list):
        return [_nullable_optionals(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = _subschemas_mapped(node, _nullable_optionals)
    required = set(result.get("required", ()))
    properties = result.get("properties")
    if isinstance(properties, dict):
        result["properties"] = {
            name: prop if name in required or not isinstance(prop, dict) else nullable(prop)
            for name, prop in properties.items()
        }
    return result


def nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """The schema that also takes `null`, written as compactly as it can be."""
    options = prop.get("anyOf")
    kind = prop.get("type")
    if isinstance(options, list) and NULL in options:
        rest = [option for option in options if option != NULL]
        if len(rest) == 1 and isinstance(rest[0].get("type"), str) and not NOT_PLAIN & set(rest[0]):
            outer = {key: value for key, value in prop.items() if key != "anyOf"}
            result = {**rest[0], "type": [rest[0]["type"], "null"], **outer}
        else:
            result = prop
    elif kind == "null" or (isinstance(kind, list) and "null" in kind):
        result = prop
    elif isinstance(kind, str) and not NOT_PLAIN & set(prop):
        result = {**prop, "type": [kind, "null"]}
    else:
        annotations = {key: prop[key] for key in ("description", "default") if key in prop}
        result = {"anyOf": [{k: v for k, v in prop.items() if k not in annotations}, NULL], **annotations}
    return {key: value for key, value in result.items() if not (key == "default" and value is None)}


def portable(node: Any, *, as_written: bool = False) -> Any:
    """The rewrites every client's schema rules need (docs/decisions/portable-schemas.md): `const` as an `enum` of
    one (Gemini's subset has no `const`), and no boolean `additionalProperties`: google-genai's conversion of an MCP
    tool list fails on either value (googleapis/python-genai#2476) and OpenAI strict refuses `true`. `true` is the
    default anyway; for `false` the executor refuses an unknown field with a message naming the accepted ones, and
    every strict conversion closes each object itself. A schema a person wrote (`as_written`, a custom tool's) keeps
    its `additionalProperties`: whether its objects are closed is its author's contract, which the server enforces
    and the MCP conformance suite checks is published (its json-schema-2020-12 scenario)."""
    if isinstance(node, list):
        return [portable(item, as_written=as_written) for item in node]
    if not isinstance(node, dict):
        return node
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key == "additionalProperties" and not as_written and (isinstance(value, bool) or value == {}):
            continue
        if key == "const" and "enum" not in node:
            result["enum"] = [value]
        elif key in ("default", "const", "enum", "examples"):
            result[key] = value
        elif key in ("properties", "$defs"):
            result[key] = {name: portable(sub, as_written=as_written) for name, sub in value.items()}
        else:
            result[key] = portable(value, as_written=as_written)
    return result


# What the executor refuses anyway, with a message naming the field: an empty string, a field not in the schema.
# Published, they cost ~3,000 characters of every model's context and teach it nothing (docs/decisions/
# catalogue-budget.md).
REFUSED_ANYWAY = (("minLength", 1), ("additionalProperties", False))


def _without_refusals(node: Any) -> Any:
    if isinstance(node, list):
        return [_without_refusals(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: value if key in ("default", "const", "enum", "examples") else _without_refusals(value)
        for key, value in node.items()
        if (key, value) not in REFUSED_ANYWAY
    }


HOISTED_MIN_CHARS = 60  # a shorter repeat costs less than the $ref that would replace it


def repeated_parts(schema: dict[str, Any]) -> list[str]:
    """The subschemas (as canonical JSON) written out more than once: pydantic hoists nested models into $defs,
    not the Literal types several models share."""
    counts: dict[str, int] = {}

    def walk(node: Any, top: bool) -> None:
        if isinstance(node, dict):
            text = json.dumps(node, sort_keys=True)
            if not top and len(text) >= HOISTED_MIN_CHARS:
                counts[text] = counts.get(text, 0) + 1
            for key, value in node.items():
                if key not in ("default", "const", "enum", "examples"):
                    walk(value, False)
        elif isinstance(node, list):
            for item in node:
                walk(item, False)

    walk(schema, True)
    return [text for text, count in counts.items() if count > 1]


def hoist_repeats(schema: dict[str, Any]) -> dict[str, Any]:
    """Each repeated subschema once, in $defs, named after the first property that uses it."""
    repeats = set(repeated_parts(schema))
    if not repeats:
        return schema
    defs: dict[str, Any] = schema.get("$defs", {})
    added: dict[str, Any] = {}
    names: dict[str, str] = {}

    def name_for(text: str, hint: str) -> str:
        if text not in names:
            base = hint[:1].upper() + hint[1:] or "Shared"
            name, n = base, 1
            while name in defs or name in added:
                n += 1
                name = f"{base}{n}"
            names[text] = name
            added[name] = {}  # the name taken before its body is built: a repeat inside gets a name of its own
            added[name] = replace(json.loads(text), name, top=True)
        return names[text]

    def replace(node: Any, hint: str, *, top: bool = False) -> Any:
        if isinstance(node, list):
            return [replace(item, hint) for item in node]
        if not isinstance(node, dict):
            return node
        text = json.dumps(node, sort_keys=True)
        if not top and text in repeats:
            return {"$ref": f"#/$defs/{name_for(text, hint)}"}
        return {
            key: value if key in ("default", "const", "enum", "examples")
            else {k: replace(v, k) for k, v in value.items()} if key == "properties"
            else replace(value, hint)
            for key, value in node.items()
        }  # fmt: skip

    body: dict[str, Any] = replace({key: value for key, value in schema.items() if key != "$defs"}, "", top=True)
    kept = {name: replace(sub, name, top=True) for name, sub in defs.items()}
    return body | {"$defs": kept | added}


def _refs(node: Any) -> list[str]:
    """The names of the local definitions a (sub)schema refers to, once per reference."""
    if isinstance(node, list):
        return [name for item in node for name in _refs(item)]
    if not isinstance(node, dict):
        return []
    own = [node["$ref"].removeprefix("#/$defs/")] if isinstance(node.get("$ref"), str) else []
    return own + [name for key, value in node.items() if key not in ("enum", "const", "default", "examples")
                  for name in _refs(value)]  # fmt: skip


def inline_single_use(schema: dict[str, Any]) -> dict[str, Any]:
    """Each definition referred to once written where it is used: pydantic puts every nested model in `$defs`,
    and a `$ref` used once costs a client more bytes and about twice the time to check a result against (its
    resolver) than the subschema written in place. Definitions used more than once, or reaching themselves (a
    recursive model), stay."""
    defs: dict[str, Any] = schema.get("$defs", {})
    body = {key: value for key, value in schema.items() if key != "$defs"}
    uses: dict[str, int] = {}
    for name in _refs([body, *defs.values()]):
        uses[name] = uses.get(name, 0) + 1

    def reaches(name: str, target: str, seen: set[str]) -> bool:
        return any(
            ref == target or (ref not in seen and ref in defs and reaches(ref, target, seen | {ref}))
            for ref in _refs(defs[name])
        )

    once = {name for name in defs if uses.get(name) == 1 and not reaches(name, name, {name})}
    if not once:
        return schema

    def place(node: Any) -> Any:
        if isinstance(node, list):
            return [place(item) for item in node]
        if not isinstance(node, dict):
            return node
        if set(node) == {"$ref"} and node["$ref"].removeprefix("#/$defs/") in once:
            return place(defs[node["$ref"].removeprefix("#/$defs/")])
        return {key: value if key in ("enum", "const", "default", "examples") else place(value)
                for key, value in node.items()}  # fmt: skip

    kept = {name: place(sub) for name, sub in defs.items() if name not in once}
    placed: dict[str, Any] = place(body)
    return placed | ({"$defs": kept} if kept else {})
