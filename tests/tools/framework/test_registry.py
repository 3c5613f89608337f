"""Registry rules reject bad definitions at start-up with errors that say what to fix."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import Field, ValidationError

from managed_tools.tools.catalogue import build_registry
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.errors import RegistryError
from managed_tools.tools.framework.wire.models import Arguments, NoArguments, WireModel


class Out(WireModel):
    ok: bool


async def handler(ctx: ToolContext, args: Any) -> Out:
    return Out(ok=True)


def tool(**overrides: Any) -> ToolDefinition:
    fields: dict[str, Any] = {
        "name": "good_tool",
        "title": "Good tool",
        "description": "A tool that does one thing.",
        "input_model": NoArguments,
        "output_model": Out,
        "handler": handler,
    }
    fields.update(overrides)
    return ToolDefinition(**fields)


class L7(Arguments):
    value: str


class L6(Arguments):
    inner: L7


class L5(Arguments):
    inner: L6


class L4(Arguments):
    inner: L5


class L3(Arguments):
    inner: L4


class L2(Arguments):
    inner: L3


class L1(Arguments):
    inner: L2  # root(1) -> L1(2) ... -> L7(8): one level too deep


class TooDeep(Arguments):
    inner: L1


class SevenDeep(Arguments):
    inner: L2  # root(1) -> L2(2) ... -> L7(7)


class Node(Arguments):
    children: list[Node] = Field(default_factory=list)


class Conditional(Arguments):
    value: str = Field(json_schema_extra={"not": {"const": "x"}})


def test_the_managed_catalogue_passes_every_rule() -> None:
    registry = build_registry()
    assert len(registry) >= 6
    assert "session_get_events" in registry.names()


@pytest.mark.parametrize("name", ["Bad Name", "UPPER", "", "x" * 65, "dots.not.allowed", "slash/no"])
def test_managed_tool_names_must_match_the_pattern(name: str) -> None:
    with pytest.raises(RegistryError, match="must match"):
        Registry([tool(name=name)])


def test_user_tool_names_only_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        registry = Registry([tool(name="My Tool", ownership="custom")])
    assert registry.get("My Tool") is not None
    assert "published anyway because it is a custom tool" in caplog.text


def test_names_are_unique() -> None:
    with pytest.raises(RegistryError, match="registered twice"):
        Registry([tool(), tool()])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"description": "   "}, "has no description"),
        ({"description": "x" * 201}, "201-character description; the limit is 200"),
        ({"title": " "}, "has no title"),
        ({"destructive": True}, "both read-only and destructive"),
        ({"input_model": TooDeep}, "nests deeper than 7 levels"),
        ({"input_model": Node}, "is recursive"),
        ({"input_model": Conditional}, "unsupported keywords ['not']"),
        (
            {"input_model": L7, "examples": (ToolExample(description="wrong", input={"value": 3}),)},
            "example 0 ('wrong') does not match its models",
        ),
        (
            {"examples": (ToolExample(description="bad output", input={}, output={"ok": "maybe"}),)},
            "does not match its models",
        ),
    ],
)
def test_rules_reject_bad_definitions(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistryError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Registry([tool(**overrides)])


def test_seven_levels_are_allowed_and_examples_validate() -> None:
    example = ToolExample(description="deep", input={"inner": {"inner": {"inner": {"inner": {"inner": {
        "inner": {"value": "v"}}}}}}}, output={"ok": True})  # fmt: skip
    registry = Registry([tool(input_model=SevenDeep, examples=(example,))])
    assert registry.get("good_tool") is not None


def test_definitions_refuse_unknown_policies_and_effects() -> None:
    with pytest.raises(ValidationError):
        tool(permission_policy="sometimes")
    with pytest.raises(ValidationError):
        tool(effects=("network_write",))
    with pytest.raises(ValidationError):
        tool(interrupt_behavior="ignore")


def test_near_names_for_unknown_tools() -> None:
    assert build_registry().near_names("session_get_event")[0] == "session_get_events"


def test_schemas_are_built_once_and_handed_out_as_copies() -> None:
    definition = build_registry().get("read")
    assert definition is not None
    first = definition.input_schema()
    first["properties"]["path"]["description"] = "changed by a caller"
    first["required"].append("nonsense")
    again = definition.input_schema()
    assert again["properties"]["path"].get("description") != "changed by a caller"
    assert "nonsense" not in again["required"]
    assert definition.output_schema() == definition.output_schema()
    assert definition.output_schema() is not definition.output_schema()
