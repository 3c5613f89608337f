"""`serve --preset coding|memory|full` and config.json's `preset`: a preset is the base selection, the other selection
flags refine it; each preset lists exactly its tools to a real MCP client (in process and over stdio) and a tool
outside it does not exist; an unknown preset gets a did-you-mean; no served tool suggests a tool that is not."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import ERAS, Connect, data
from support.snapshot_tools import preset_figures
from test_permissions import cli
from test_toolsets import SERVE, assert_hidden, stdio_client

from managed_tools.server.cli.command import main
from managed_tools.server.config.serve_config import Selecting, ServeConfig
from managed_tools.server.publishing.publish import to_mcp_tool
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.catalogue import FAMILIES, build_registry
from managed_tools.tools.discovery import tools as discovery
from managed_tools.tools.discovery.tools import OWN as SEARCH_TOOLS
from managed_tools.tools.framework.definitions.toolsets import PRESETS, ToolSelection
from managed_tools.tools.framework.wire.errors import RegistryError

pytestmark = pytest.mark.anyio

FAMILY_OF = {d.name: family for family, group in FAMILIES.items() for d in group}
EVERYTHING = list(FAMILY_OF)
# What each preset serves of the managed catalogue, written out rather than derived from PRESETS.
CODING_FAMILIES = ("sessions", "outcomes", "memory", "recall", "planning", "skills", "permissions")
MEMORY_FAMILIES = ("outcomes", "memory", "recall", "substrate", "permissions")
MEMORY_TOOLS = ("session_get_snapshot", "session_get_events", "session_get_trace", "agent_compare_setup")
EXPECTED = {
    "coding": [n for n in EVERYTHING if FAMILY_OF[n] in CODING_FAMILIES or n == "agent_compare_setup"],
    "memory": [
        n for n in EVERYTHING
        if FAMILY_OF[n] in MEMORY_FAMILIES
        or n in MEMORY_TOOLS
    ],
    "full": EVERYTHING,
}  # fmt: skip
FILES = ["read", "write", "edit", "glob", "grep"]
OUTSIDE = {
    "coding": ["read", "edit", "bash", "shell_run", "resources_list"],
    "memory": ["write", "bash", "skills_read"],
}


def served(**selection: Any) -> list[str]:
    return build_registry(selection=ToolSelection(**selection)).names()


def test_no_file_or_shell_tool_in_coding() -> None:
    assert not {"files", "shell", "sandbox"} & {FAMILY_OF[n] for n in EXPECTED["coding"]}
    assert {"session_delegate", "outcome_grade", "memory_write", "planning_add_step", "skills_read"} <= {
        *EXPECTED["coding"]
    }


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_serves_its_tools(preset: str) -> None:
    assert served(preset=preset) == EXPECTED[preset]
    searched = len(SEARCH_TOOLS) if PRESETS[preset].tool_search else 0
    assert preset_figures()[preset][0] == len(EXPECTED[preset]) + searched


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        # the other flags refine the base: toolsets and tools add, exclude removes, read-only filters
        ({"preset": "coding", "toolsets": ("files",)}, [*EXPECTED["coding"][:-2], *FILES, *EXPECTED["coding"][-2:]]),
        ({"preset": "coding", "tools": ("grep",)}, [*EXPECTED["coding"][:-2], "grep", *EXPECTED["coding"][-2:]]),
        ({"preset": "coding", "exclude_tools": ("session_delegate", "agent_compare_setup")},
         [n for n in EXPECTED["coding"] if n not in ("session_delegate", "agent_compare_setup")]),
        ({"preset": "memory", "read_only": True, "tools": ("memory_write",)},
         served(toolsets=MEMORY_FAMILIES, tools=MEMORY_TOOLS, read_only=True)),
        ({"preset": "full", "toolsets": ("planning",)}, EVERYTHING),
        ({"preset": "coding", "toolsets": ()}, EXPECTED["coding"]),
    ],
)  # fmt: skip
def test_the_other_flags_refine_a_preset(selection: dict[str, Any], expected: list[str]) -> None:
    assert served(**selection) == expected


def test_the_users_toolsets_are_in_every_preset() -> None:
    base = FAMILIES["environment"][0]
    upstream = base.model_copy(update={"name": "up__describe", "ownership": "mcp"})
    extension = base.model_copy(update={"name": "my_describe"})
    for preset in PRESETS:
        names = build_registry([upstream], extensions=[extension], selection=ToolSelection(preset=preset)).names()
        assert names[-2:] == ["my_describe", "up__describe"], preset


def test_no_served_tool_suggests_a_tool_the_preset_leaves_out() -> None:
    """Every `tool="..."` next step written in the packages of a preset's tools names a served tool. Only the
    shell's own steps (about a shell tool or a running command) are left: without the shell toolset neither
    exists on that server."""
    shell = {d.name for d in FAMILIES["shell"]}
    for preset in PRESETS:
        registry = build_registry(selection=ToolSelection(preset=preset))
        packages = {Path(inspect.getfile(d.handler)).parent for d in registry if d.handler is not None}
        suggested = {m for p in packages for f in p.glob("*.py") for m in re.findall(r'tool="(\w+)"', f.read_text())}
        assert suggested, preset
        assert suggested - set(registry.names()) <= shell, preset


@pytest.mark.parametrize("given", ["codng", "Coding", "memroy"])
def test_an_unknown_preset_gets_a_guess(given: str) -> None:
    with pytest.raises(RegistryError) as refused:
        served(preset=given)
    guess = {"codng": "coding", "Coding": "coding", "memroy": "memory"}[given]
    assert str(refused.value) == (
        f"Unknown preset {given!r} (did you mean {guess!r}?); the presets are: coding, memory, full."
    )


def test_an_unknown_preset_is_a_one_line_startup_error(workspace: Path, tmp_path: Path) -> None:
    flag = subprocess.run(
        [*SERVE, "--workspace", str(workspace), "--preset", "codng"],
        check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.json").write_text(json.dumps({"preset": "nope"}))
    key = subprocess.run(
        [*SERVE, "--workspace", str(workspace), "--data-dir", str(data_dir)],
        check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert (flag.returncode, flag.stdout) == (2, "")
    assert flag.stderr == (
        "managed-tools: Unknown preset 'codng' (did you mean 'coding'?); the presets are: coding, memory, full.\n"
    )
    assert key.returncode == 2 and key.stderr == (
        "managed-tools: Unknown preset 'nope'; the presets are: coding, memory, full.\n"
    )


def test_config_key_and_flags_over_it(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.json").write_text(json.dumps({"preset": "coding", "toolsets": ["files"]}))
    from_file = ServeConfig.build(workspace=workspace, data_dir=data_dir).selection
    assert from_file == ToolSelection(preset="coding", toolsets=("files",))
    flags = Selecting(preset="memory", toolsets=("skills",))
    both = ServeConfig.build(workspace=workspace, data_dir=data_dir, selection=flags).selection
    assert both == ToolSelection(preset="memory", toolsets=("skills",))


# ---- through real MCP clients ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("preset", list(PRESETS))
async def test_a_client_sees_the_preset_and_nothing_else(
    workspace: Path, connect: Connect, preset: str, mode: str
) -> None:
    # Every served tool listed (coding lists a core by default: tests/server/publishing/test_tool_search.py)
    config = ServeConfig.build(
        workspace=workspace, data_dir=None, selection=Selecting(preset=preset), tool_search=False
    )
    async with open_runtime(config) as runtime, connect(runtime, mode) as client:
        listing = await client.list_tools()
        for name in OUTSIDE.get(preset, []):
            await assert_hidden(client, name)
        planned = data(await client.call_tool("memory_write", {"target": "working_buffer", "content": "kept"}))
    assert [t.name for t in listing.tools] == EXPECTED[preset]
    assert planned["target"] == "working_buffer"
    received = [t.model_dump(by_alias=True, exclude_none=True) for t in listing.tools]
    searched = [to_mcp_tool(d).model_dump(by_alias=True, exclude_none=True) for d in discovery.DEFINITIONS]
    served = received + (searched if PRESETS[preset].tool_search else [])  # listed once tools_describe adds them
    measured = len(json.dumps({"tools": served}, separators=(",", ":"), ensure_ascii=False).encode())
    assert measured == preset_figures()[preset][1]  # the documented size is what a client receives


async def test_coding_over_stdio(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("one\n")
    async with stdio_client(workspace, "--preset", "coding", "--exclude-tools", "session_run_child", mode="auto") as c:
        names = [t.name for t in (await c.list_tools()).tools]
        for name in ("read", "bash", "session_run_child"):
            await assert_hidden(c, name)
        outcome = data(await c.call_tool("outcome_define", {"title": "Ship", "successCriteria": ["notes read"]}))
        unlisted = data(await c.call_tool("tools_call", {"name": "learning_list", "arguments": {}}))
        excluded = await c.call_tool("tools_call", {"name": "session_run_child", "arguments": {}})
        instructions = c.instructions or ""
    # The coding default lists a core and the search tools; the rest of the preset is one search away.
    assert names == ["session_get_snapshot", "outcome_define", "memory_read", "memory_write", *SEARCH_TOOLS]
    assert unlisted["name"] == "learning_list" and excluded.is_error
    assert outcome["activeOutcome"]["title"] == "Ship"
    assert "files (" not in instructions and "shell (" not in instructions and "memory (" in instructions


def test_the_tools_command_takes_a_preset(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "--workspace", str(workspace), "--preset", "coding", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in printed["tools"]] == [*EXPECTED["coding"], *SEARCH_TOOLS]
    sets = {s["name"]: s for s in printed["toolsets"]}
    assert sets["files"]["served"] == [] and sets["environment"]["served"] == ["agent_compare_setup"]


async def test_the_approval_commands_take_a_preset(runtime: Any, config: ServeConfig, connect: Connect) -> None:
    """A request for a tool the preset leaves out is neither shown nor approved under that preset."""
    async with connect(runtime) as client:  # no elicitation: the call fails closed, its request waits
        blocked = await client.call_tool("shell_run", {"command": "true"})
    request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
    hidden = await cli(config, "pending", "--json", "--preset", "coding")
    shown = await cli(config, "pending", "--json", "--preset", "full")
    refused = await cli(config, "approve", request_id, "--preset", "memory")
    assert json.loads(hidden.stdout)["requests"] == [], hidden.stderr
    assert [r["id"] for r in json.loads(shown.stdout)["requests"]] == [request_id]
    assert refused.returncode == 1 and f"No permission request {request_id} exists." in refused.stderr
