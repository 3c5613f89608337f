"""config.json `overrides` (issue 27 item 2): a tool's title, description, annotations and a stricter policy, for
ours, a custom tool and (tests/server/upstream/test_gateway.py) an upstream's; seed 002's `accepts_overrides` and
`exclude_value_from_context` (result fields the model never sees, while the person and the audit do)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import ERAS, data
from mcp import Client
from mcp.client import ClientRequestContext

from managed_tools.server.config.config_files import KEYS
from managed_tools.server.config.serve_config import ConfigError, ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import StartupError, open_runtime
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

ASK_WEATHER = {
    "name": "ask_weather",
    "description": "A person reports the weather.",
    "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "outputSchema": {"type": "object", "properties": {"tempC": {"type": "number"}}, "required": ["tempC"]},
}


def configured(workspace: Path, tmp_path: Path, **document: Any) -> ServeConfig:
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    (data_dir / "config.json").write_text(json.dumps(document), encoding="utf-8")
    return ServeConfig.build(workspace=workspace, data_dir=data_dir)


@asynccontextmanager
async def client_of(config: ServeConfig, mode: str = "legacy", **kwargs: Any) -> AsyncIterator[tuple[Runtime, Client]]:
    async with open_runtime(config) as rt, Client(build_server(rt, transport="memory"), mode=mode, **kwargs) as client:
        yield rt, client


async def refused(config: ServeConfig) -> str:
    with pytest.raises(StartupError) as caught:
        async with open_runtime(config):
            pass
    return str(caught.value)


def test_overrides_is_a_config_key() -> None:
    assert "overrides" in KEYS


async def test_our_tool_gets_a_new_title_description_hints_and_a_stricter_policy(
    workspace: Path, tmp_path: Path
) -> None:
    override = {
        "title": "Read the notes",
        "description": "Read one of the team's memory stores.",
        "annotations": {"openWorldHint": True},
        "permissionPolicy": "always_ask",
    }
    asked: list[str] = []

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    config = configured(workspace, tmp_path, overrides={"memory_read": override})
    async with client_of(config, elicitation_callback=person) as (_, client):
        tool = next(t for t in (await client.list_tools()).tools if t.name == "memory_read")
        call = await client.call_tool("memory_read", {"target": "session_state"})
    assert (tool.title, tool.description) == ("Read the notes", "Read one of the team's memory stores.")
    assert tool.annotations is not None and tool.annotations.open_world_hint is True
    assert tool.annotations.read_only_hint is True  # untouched
    assert (tool.meta or {})["managed-tools/tool"]["permissionPolicy"] == "always_ask"
    assert asked and call.is_error  # it asked, and a no is a no


@pytest.mark.parametrize(
    ("tool", "override", "says"),
    [
        ("memory_promote_note", {"permissionPolicy": "always_allow"}, "an override only tightens"),
        ("memory_write", {"annotations": {"readOnlyHint": True}}, "readOnlyHint would claim memory_write"),
        (
            "shell_run",
            {"annotations": {"destructiveHint": False, "openWorldHint": False}},
            "destructiveHint, openWorldHint",
        ),
        ("sandbox_execute", {"description": "Anything goes."}, "does not accept a new title or description"),
        ("memory_write", {"excludeFromContext": ["nope"]}, "memory_write's result has no field nope"),
        ("memory_wirte", {"title": "x"}, "names tools that do not exist: memory_wirte (did you mean 'memory_write'?)"),
    ],
)
async def test_a_looser_or_wrong_override_is_a_clear_config_error(
    workspace: Path, tmp_path: Path, tool: str, override: dict[str, Any], says: str
) -> None:
    message = await refused(configured(workspace, tmp_path, overrides={tool: override}))
    assert says in message and "Traceback" not in message


async def test_pre_approving_stays_the_policy_keys(workspace: Path, tmp_path: Path) -> None:
    """`policy` may allow; an override of the same tool that also allows is then no loosening."""
    config = configured(
        workspace,
        tmp_path,
        policy={"memory_promote_note": "always_allow"},
        overrides={"memory_promote_note": {"permissionPolicy": "always_allow", "title": "Promote"}},
    )
    async with client_of(config) as (_, client):
        tool = next(t for t in (await client.list_tools()).tools if t.name == "memory_promote_note")
    assert tool.title == "Promote" and "permissionPolicy" not in (tool.meta or {})["managed-tools/tool"]


async def test_a_custom_tool_is_overridden_too(workspace: Path, tmp_path: Path) -> None:
    config = configured(
        workspace,
        tmp_path,
        customTools=[ASK_WEATHER],
        overrides={"ask_weather": {"description": "Ask Ada for the weather.", "annotations": {"readOnlyHint": False}}},
    )
    async with client_of(config) as (_, client):
        tool = next(t for t in (await client.list_tools()).tools if t.name == "ask_weather")
    assert tool.description == "Ask Ada for the weather."
    assert tool.annotations is not None and tool.annotations.read_only_hint is False


async def test_a_tool_an_override_says_writes_is_not_served_read_only(workspace: Path, tmp_path: Path) -> None:
    config = configured(
        workspace, tmp_path, readOnly=True, overrides={"memory_read": {"annotations": {"readOnlyHint": False}}}
    )
    async with client_of(config) as (_, client):
        names = {t.name for t in (await client.list_tools()).tools}
    assert "memory_read" not in names and "memory_search" in names


async def test_unknown_override_keys_are_refused(workspace: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"invalid at overrides\.memory_read\.policy: unknown key 'policy'"):
        configured(workspace, tmp_path, overrides={"memory_read": {"policy": "always_ask"}})


@pytest.mark.parametrize("mode", ERAS)
async def test_a_field_kept_from_the_model_reaches_the_person_and_the_audit(
    workspace: Path, tmp_path: Path, mode: str
) -> None:
    config = configured(workspace, tmp_path, overrides={"memory_write": {"excludeFromContext": ["content"]}})
    words = "kept-out-of-context 7f3e\n"  # a memory store keeps a final newline
    async with client_of(config, mode) as (_, client):
        tool = next(t for t in (await client.list_tools()).tools if t.name == "memory_write")
        call = await client.call_tool("memory_write", {"target": "session_state", "content": words})
        got = await client.call_tool("session_get_events", {"limit": 20})
    assert tool.output_schema is not None and "content" not in tool.output_schema["properties"]
    assert "content" not in tool.output_schema.get("required", [])
    assert not call.is_error and "content" not in (call.structured_content or {})
    assert "versionId" in (call.structured_content or {})
    assert all(words not in getattr(block, "text", "") for block in call.content)  # nor in the text the model reads
    assert (call.meta or {})["managed-tools/withheld"] == {"content": words}  # for the person (the host)
    completed = [
        e["payload"]
        for e in data(got)["events"]
        if e["type"] == "span.completed" and e["payload"]["toolName"] == "memory_write"
    ]
    digest = hashlib.sha256(json.dumps(words).encode()).hexdigest()
    assert completed[0]["withheld"] == {"content": {"sha256": digest, "chars": len(json.dumps(words))}}
    assert words not in json.dumps(data(got))  # the audit keeps its digest: events are readable by the model
