"""Extensions (`--tools-module`): tools with rendered content and client logs, resources, prompts, completion,
multi-select forms; loaded like a user's module, served to real clients in both eras."""

from __future__ import annotations

import base64
import logging
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import ERAS, Connect, data
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import ClientRequestContext
from support import probe_extension

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.extensions import Extensions
from managed_tools.server.runtime.opening import StartupError, open_runtime, startup_extensions

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parents[2]


@pytest.fixture
def config(workspace: Path) -> ServeConfig:
    return ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=("support.probe_extension",))


@asynccontextmanager
async def serve(config: ServeConfig, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    extensions = startup_extensions(config)
    async with open_runtime(config, extensions) as runtime:
        server = build_server(runtime, transport="memory", extensions=extensions)
        async with Client(server, mode=mode, **kwargs) as client:
            yield client


@pytest.mark.parametrize("mode", ERAS)
async def test_resources_from_an_extension(config: ServeConfig, mode: str) -> None:
    async with serve(config, mode) as client:
        # the extension's resources are served beside the built-in ones (managed-tools://...)
        listed = {r.uri: r for r in (await client.list_resources()).resources if r.uri.startswith("probe://")}
        templates = [
            t for t in (await client.list_resource_templates()).resource_templates
            if t.uri_template.startswith("probe://")
        ]  # fmt: skip
        text = (await client.read_resource("probe://text")).contents[0]
        blob = (await client.read_resource("probe://bytes")).contents[0]
        note = (await client.read_resource("probe://notes/42")).contents[0]
        with pytest.raises(MCPError, match="Unknown resource: probe://nothing"):
            await client.read_resource("probe://nothing")
        with pytest.raises(MCPError) as failed:
            await client.read_resource("probe://broken")
    assert set(listed) == {"probe://text", "probe://bytes", "probe://broken"}
    assert listed["probe://bytes"].mime_type == "application/octet-stream"
    assert [t.uri_template for t in templates] == ["probe://notes/{id}"]
    assert isinstance(text, types.TextResourceContents) and text.text == "Plain text."
    assert isinstance(blob, types.BlobResourceContents) and base64.b64decode(blob.blob) == b"\x00\x01binary"
    assert isinstance(note, types.TextResourceContents) and (note.uri, note.text) == ("probe://notes/42", "Note 42")
    assert "Reading probe://broken failed (RuntimeError)" in failed.value.error.message
    assert "secret detail" not in failed.value.error.message


# resources/subscribe and logging/setLevel are deprecated at 2026-07-28; the handshake era still has them.
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_subscriptions_are_accepted_for_known_resources(config: ServeConfig) -> None:
    async with serve(config, "legacy") as client:
        assert client.server_capabilities.resources is not None
        assert client.server_capabilities.resources.subscribe is True
        await client.subscribe_resource("probe://notes/7")
        await client.unsubscribe_resource("probe://notes/7")
        with pytest.raises(MCPError, match="Unknown resource"):
            await client.subscribe_resource("probe://elsewhere")


@pytest.mark.parametrize("mode", ERAS)
async def test_prompts_and_completion(config: ServeConfig, mode: str) -> None:
    async with serve(config, mode) as client:
        prompt = (await client.list_prompts()).prompts[-1]  # after the planning strategies
        got = await client.get_prompt("probe_greet", {"name": "Ada"})
        with pytest.raises(MCPError, match="Prompt probe_greet needs the argument"):
            await client.get_prompt("probe_greet", {})
        with pytest.raises(MCPError, match="Unknown prompt"):
            await client.get_prompt("nope", {})
        completed = await client.complete(types.PromptReference(name="probe_greet"), {"name": "name", "value": "a"})
    assert (prompt.name, [a.name for a in prompt.arguments or []]) == ("probe_greet", ["name"])
    first, second = got.messages
    assert isinstance(first.content, types.TextContent) and first.content.text == "Hello Ada"
    assert isinstance(second.content, types.ImageContent) and second.content.mime_type == "image/png"
    assert completed.completion.values == ["Ada", "Alan"]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_renders_its_output_as_content_blocks(config: ServeConfig, mode: str) -> None:
    async with serve(config, mode) as client:
        result = await client.call_tool("probe_picture", {})
    assert [block.type for block in result.content] == ["text", "image", "resource"]
    assert result.structured_content is not None and result.structured_content["caption"] == "one pixel"
    image = result.content[1]
    assert isinstance(image, types.ImageContent) and image.data == result.structured_content["png"]


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_tool_logs_reach_the_client_at_the_level_it_asked(config: ServeConfig) -> None:
    received: list[tuple[str, Any]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append((params.level, params.data))

    async with serve(config, "legacy", logging_callback=on_log) as client:
        assert client.server_capabilities.logging is not None
        data(await client.call_tool("probe_chatty", {}))
        everything = list(received)
        received.clear()
        await client.set_logging_level("warning")
        data(await client.call_tool("probe_chatty", {}))
        warnings_only = list(received)
    async with serve(config, "auto", logging_callback=on_log, log_level="info") as client:
        received.clear()
        data(await client.call_tool("probe_chatty", {}))
        opted_in = list(received)
    assert everything == [("debug", "looking"), ("info", "working"), ("warning", "careful")]
    assert warnings_only == [("warning", "careful")]
    assert opted_in == [("info", "working"), ("warning", "careful")]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_multi_select_form_for_a_custom_tool(config: ServeConfig, mode: str) -> None:
    asked: list[dict[str, Any]] = []

    async def pick(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={"colours": ["red", "blue"], "size": "m"})

    async with serve(config, mode, elicitation_callback=pick) as client:
        result = data(await client.call_tool("probe_pick", {}))
    assert result == {"colours": ["red", "blue"], "size": "m"}
    form = asked[0]["properties"]
    assert form["colours"]["items"]["enum"] == ["red", "green", "blue"]
    assert form["size"]["enumNames"] == ["Small", "Medium"]
    # the labels a person reads are shown as written: the titled options stay `const` (SEP-1330), though the
    # published schema writes them as an enum of one (docs/decisions/portable-schemas.md)
    assert form["finish"] == probe_extension.TOOLS[2].output_model.model_json_schema()["properties"]["finish"]
    assert form["finish"]["title"] == "Finish" and form["finish"]["items"]["anyOf"][0] == {
        "const": "matt",
        "title": "Matt",
    }


async def test_a_custom_tool_is_published_as_written(config: ServeConfig) -> None:
    async with serve(config, "auto") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}["probe_pick"]
    assert listed.input_schema == probe_extension.TOOLS[2].input_schema()
    assert listed.input_schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_extension_errors_are_clear_at_startup(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ext_empty.py").write_text("VALUE = 1\n")
    (tmp_path / "ext_wrong.py").write_text("RESOURCES = ['probe://x']\n")
    (tmp_path / "ext_twice.py").write_text("from support.probe_extension import RESOURCES, PROMPTS\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    expected = {
        "ext_empty": "Tools module 'ext_empty' has none of TOOLS, RESOURCES or PROMPTS.",
        "ext_wrong": "RESOURCES in 'ext_wrong' must hold Resource or ResourceTemplate objects, found str.",
        "ext_missing": "Cannot import tools module 'ext_missing': ModuleNotFoundError",
    }
    for module, message in expected.items():
        with pytest.raises(StartupError, match="^" + re.escape(message)):
            startup_extensions(ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=(module,)))
    twice = ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=("support.probe_extension", "ext_twice"))
    with pytest.raises(StartupError, match="Each resource must be published once; registered twice: probe://broken,"):
        startup_extensions(twice)


async def test_without_extensions_the_planning_prompts_are_served(workspace: Path) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    async with open_runtime(config) as runtime:
        server = build_server(runtime, transport="memory", extensions=Extensions())
        async with Client(server, mode="legacy") as client:
            capabilities = client.server_capabilities
    assert capabilities.resources is not None  # the built-in resources (memory stores, files) are always there
    assert capabilities.prompts is not None and capabilities.completions is not None  # the planning strategies


async def test_the_cli_serves_an_extensions_resources_over_stdio(config: ServeConfig) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}  # this checkout, any cwd
    args = [
        "-m",
        "managed_tools.server",
        "serve",
        "--workspace",
        str(config.workspace),
        "--tools-module",
        "support.probe_extension",
    ]
    async with Client(StdioServerParameters(command=sys.executable, args=args, env=env)) as client:
        read = (await client.read_resource("probe://notes/stdio")).contents[0]
        tools = {t.name for t in (await client.list_tools()).tools}
    assert isinstance(read, types.TextResourceContents) and read.text == "Note stdio"
    assert {"probe_picture", "probe_chatty", "probe_pick"} <= tools


BAD_NAME_MODULE = """
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments, WireModel


class Args(Arguments):
    x: int = 1


class Out(WireModel):
    y: int


async def echo(ctx, args):
    return Out(y=args.x)


TOOLS = (
    ToolDefinition(
        name="Bad.Name", title="Bad", description="A user tool with a dotted name.",
        input_model=Args, output_model=Out, handler=echo,
    ),
)
"""


async def test_a_user_tool_with_an_off_pattern_name_only_warns(
    workspace: Path, tmp_path: Path, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    module = tmp_path / "bad_name_tools.py"
    module.write_text(BAD_NAME_MODULE)
    config = ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=(str(module),))
    with caplog.at_level(logging.WARNING):
        async with open_runtime(config) as runtime, connect(runtime) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            result = data(await client.call_tool("Bad.Name", {"x": 3}))
    assert "Bad.Name" in names and result == {"y": 3}
    assert "published anyway because it is a user tool" in caplog.text
