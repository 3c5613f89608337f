"""`serve --toolsets/--tools/--exclude-tools/--read-only` and their config.json keys: a tool not served does not
exist for that server (tools/list, calls, permissions_check, approvals, views, prompts, instructions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import ERAS, data, error_text
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.context import ClientRequestContext
from test_http import client, serving
from test_permissions import cli

from managed_tools.server.cli.command import main
from managed_tools.server.config.serve_config import Selecting, ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.catalogue import FAMILIES, build_registry
from managed_tools.tools.framework.context.uris import view_uri
from managed_tools.tools.framework.definitions.custom import CustomToolSpec, custom_tool
from managed_tools.tools.framework.definitions.latent import LatentToolSpec, latent_tool
from managed_tools.tools.framework.definitions.toolsets import ToolSelection
from managed_tools.tools.framework.wire.errors import RegistryError

pytestmark = pytest.mark.anyio

SERVE = [sys.executable, "-m", "managed_tools.server", "serve"]
PLANNING = ["planning_setup_plan", "planning_add_step", "planning_update_step", "planning_read_plan"]
SHELL_READS = ["shell_describe", "shell_history", "shell_read_command", "shell_read_last_output", "shell_wait"]
EVERYTHING = [d.name for family in FAMILIES.values() for d in family]


def served(**selection: Any) -> list[str]:
    return build_registry(selection=ToolSelection(**selection)).names()


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        ({}, EVERYTHING),  # all is the default
        ({"toolsets": ("planning",)}, PLANNING),
        ({"toolsets": ("planning",), "tools": ("bash",)}, [*PLANNING, "bash"]),
        ({"tools": ("read", "bash")}, ["read", "bash"]),  # --tools alone: just those
        ({"toolsets": ("planning", "all")}, EVERYTHING),
        # exclude beats include
        ({"toolsets": ("planning",), "tools": ("bash",), "exclude_tools": ("bash", "planning_add_step")},
         ["planning_setup_plan", "planning_update_step", "planning_read_plan"]),
        # read-only beats everything: nothing that writes (write, planning) or runs a program (bash)
        ({"toolsets": ("shell", "planning"), "tools": ("write",), "read_only": True},
         ["planning_read_plan", *SHELL_READS]),
        ({"toolsets": ()}, []),
    ],
)  # fmt: skip
def test_precedence(selection: dict[str, Any], expected: list[str]) -> None:
    assert served(**selection) == expected


def test_the_users_toolsets() -> None:
    custom = custom_tool(CustomToolSpec.model_validate({"name": "ask", "description": "A person answers.",
                                                        "outputSchema": {"type": "object"}}))  # fmt: skip
    latent = latent_tool(LatentToolSpec.model_validate({"name": "think", "description": "A model answers.",
                                                        "outputSchema": {"type": "object"}}))  # fmt: skip
    base = FAMILIES["environment"][0]
    upstream = base.model_copy(update={"name": "up__describe", "ownership": "mcp"})
    extension = base.model_copy(update={"name": "my_describe"})

    def names(*toolsets: str) -> list[str]:
        registry = build_registry([custom, latent, upstream], extensions=[extension],
                                  selection=ToolSelection(toolsets=toolsets))  # fmt: skip
        return registry.names()

    assert names("custom") == ["latent_submit", "ask", "think"]
    assert names("extensions") == ["my_describe"]
    assert names("mcp") == ["up__describe"]
    assert build_registry([custom]).names()[-1] == "ask"  # published after the families


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        ({"toolsets": ("memory", "nope")}, "Unknown toolset 'nope'; the toolsets are: environment, sessions,"),
        ({"tools": ("bassh",)}, r"Unknown tool 'bassh' \(did you mean 'bash'\?\); the tools are: environment_"),
        ({"toolsets": ("fles",)}, r"Unknown toolset 'fles' \(did you mean 'files'\?\); the toolsets are:"),
        ({"exclude_tools": ("nope",)}, "Unknown tool 'nope'"),
    ],
)
def test_an_unknown_name_is_refused(selection: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistryError, match="^" + message) as refused:
        served(**selection)
    assert "\n" not in str(refused.value)


def test_an_unknown_toolset_is_a_one_line_startup_error(workspace: Path) -> None:
    proc = subprocess.run(
        [*SERVE, "--workspace", str(workspace), "--toolsets", "memory,nope"],
        check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("managed-tools: Unknown toolset 'nope'; the toolsets are: environment,")
    assert proc.stderr.rstrip().endswith("custom, extensions, mcp, all.")


def test_config_keys_and_flags_over_them(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.json").write_text(
        json.dumps({"toolsets": ["planning"], "excludeTools": ["planning_add_step"], "readOnly": True})
    )
    from_file = ServeConfig.build(workspace=workspace, data_dir=data_dir).selection
    assert from_file == ToolSelection(toolsets=("planning",), exclude_tools=("planning_add_step",), read_only=True)
    flags = Selecting(toolsets=("planning", "memory"), read_only=False)
    both = ServeConfig.build(workspace=workspace, data_dir=data_dir, selection=flags).selection
    assert both == ToolSelection(toolsets=("planning", "memory"), exclude_tools=("planning_add_step",))


def test_the_tools_command_shows_toolsets_and_what_flags_publish(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tools", "--workspace", str(workspace), "--toolsets", "planning", "--tools", "bash", "--json"]
    assert main([*argv, "--exclude-tools", "planning_add_step"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in printed["tools"]] == ["planning_setup_plan", "planning_update_step",
                                                     "planning_read_plan", "bash"]  # fmt: skip
    sets = {s["name"]: s for s in printed["toolsets"]}
    assert sets["planning"]["hidden"] == ["planning_add_step"] and sets["shell"]["served"] == ["bash"]
    assert main(["tools", "--workspace", str(workspace), "--read-only"]) == 0
    text = capsys.readouterr().out
    assert "planning      1 of 4          the session's plan and steps" in text
    assert "\nbash " not in text and "\nread " in text


# ---- over real transports, both eras ------------------------------------------------------------------------

# each flag visible: memory and permissions only, shell_describe added, memory_read dropped, and read-only drops
# memory_write and the program runner bash
STDIO_FLAGS = ("--toolsets", "memory,permissions", "--tools", "shell_describe,bash", "--exclude-tools",
               "memory_read", "--read-only")  # fmt: skip
STDIO_SERVED = ["memory_list", "memory_list_versions", "memory_read_version", "learning_list", "memory_search",
                "shell_describe", "permissions_describe", "permissions_check"]  # fmt: skip


@asynccontextmanager
async def stdio_client(workspace: Path, *flags: str, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    argv = [*SERVE[1:], "--workspace", str(workspace), *flags]
    params = StdioServerParameters(command=SERVE[0], args=argv, env=dict(os.environ))
    async with Client(params, mode=mode, **kwargs) as mcp_client:
        yield mcp_client


async def assert_hidden(mcp_client: Client, name: str) -> None:
    """Calling it is the unknown-tool error, with no hint that it exists; permissions_check does not know it."""
    called = await mcp_client.call_tool(name, {})
    assert called.is_error and error_text(called).startswith(f"Unknown tool '{name}'.")
    suggested = error_text(called).partition("Did you mean: ")[2].rstrip("?").split(", ")
    assert name not in suggested
    checked = data(await mcp_client.call_tool("permissions_check", {"toolName": name}))
    assert (checked["exists"], checked["allowed"]) == (False, False) and name not in checked["nearNames"]


@pytest.mark.parametrize("mode", ERAS)
async def test_flags_over_stdio(workspace: Path, mode: str) -> None:
    asked: list[str] = []

    async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async with stdio_client(workspace, *STDIO_FLAGS, mode=mode, elicitation_callback=elicit) as mcp_client:
        listing = await mcp_client.list_tools()
        assert [t.name for t in listing.tools] == STDIO_SERVED
        for hidden in ("memory_write", "memory_read", "bash", "shell_run", "planning_read_plan"):
            await assert_hidden(mcp_client, hidden)
        instructions = mcp_client.instructions or ""
    assert not asked  # a hidden always_ask tool never reaches a person
    assert "memory (" in instructions and "shell (" in instructions and "planning" not in instructions
    if mode == "auto":  # the 2026-07-28 wire carries the cache hint
        assert (listing.ttl_ms, listing.cache_scope) == (60_000, "private")


# planning and shell, read plus the read-only hand's companions; shell_history excluded; read-only drops the
# planning writers and bash
HTTP_SELECTION = Selecting(toolsets=("planning", "shell"), tools=("read",), exclude_tools=("shell_history",),
                           read_only=True)  # fmt: skip
HTTP_SERVED = ["planning_read_plan", "read", "shell_describe", "shell_read_command", "shell_read_last_output",
               "shell_wait"]  # fmt: skip


async def test_flags_over_http_in_both_eras(workspace: Path) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=None, selection=HTTP_SELECTION)
    async with serving(config) as http:
        for mode in ERAS:
            async with client(http, mode) as first, client(http, mode) as second:
                lists = [await c.list_tools() for c in (first, second, first)]
                assert [t.name for t in lists[0].tools] == HTTP_SERVED
                # deterministic: the same bytes for every connection and after other requests
                assert len({listing.model_dump_json() for listing in lists}) == 1
                hidden = await first.call_tool("shell_history", {})
                assert error_text(hidden).startswith("Unknown tool 'shell_history'.")
                resources = await first.list_resources()
                assert not any(r.name == "shell_history" for r in resources.resources)
                session = data(await first.call_tool("shell_describe", {}))["sessionId"]
                with pytest.raises(MCPError):
                    await first.read_resource(view_uri("shell_history", session))
                prompts = await first.list_prompts()
                assert prompts.prompts == []  # the planning guidance names planning tools not served


async def test_what_lists_tools_lists_only_the_served(workspace: Path, connect: Any) -> None:
    """The setup contract, the permission posture and their resource views agree with tools/list."""
    selection = ToolSelection(toolsets=("environment", "permissions", "memory"), exclude_tools=("memory_write",))
    config = ServeConfig.build(workspace=workspace, data_dir=None).model_copy(update={"selection": selection})
    async with open_runtime(config) as runtime, connect(runtime) as mcp_client:
        names = [t.name for t in (await mcp_client.list_tools()).tools]
        setup = data(await mcp_client.call_tool("agent_describe_setup", {}))
        posture = data(await mcp_client.call_tool("permissions_describe", {}))
        views = {r.name for r in (await mcp_client.list_resources()).resources}
    assert [t["name"] for t in setup["agentSetup"]["tools"]["tools"]] == names
    assert "memory_write" not in names and [t["name"] for t in posture["alwaysAskTools"]] == [
        "memory_promote_note",
        "memory_correct",
    ]
    assert {"agent_setup", "permission_posture"} <= views and not views & {"shell_history", "outcome_history"}


async def test_a_hidden_tools_request_is_never_shown_or_approved(
    runtime: Any, config: ServeConfig, connect: Any
) -> None:
    async with connect(runtime) as mcp_client:  # no elicitation: the call fails closed, its request waits
        blocked = await mcp_client.call_tool("shell_run", {"command": "true"})
    request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
    listed = await cli(config, "pending", "--json", "--read-only")
    assert json.loads(listed.stdout)["requests"] == [], listed.stderr
    refused = await cli(config, "approve", request_id, "--read-only")
    assert refused.returncode == 1 and f"No permission request {request_id} exists." in refused.stderr
    (config.data_dir / "config.json").write_text(json.dumps({"readOnly": True}))
    assert json.loads((await cli(config, "pending", "--json")).stdout)["requests"] == []
