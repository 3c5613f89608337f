"""The installed server cannot be shadowed: a user's project may hold its own `server.py`, `tools/` and `stores/`
and put itself first on the path (PYTHONPATH=.), and the server still starts and lists its catalogue; a user's
extension loads from a file path without any PYTHONPATH."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import StartupError, startup_extensions

pytestmark = pytest.mark.anyio

EXTENSION = """
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import NoArguments, WireModel


class Echo(WireModel):
    said: str


async def hello(ctx, args):
    return Echo(said="hello")


TOOLS = [ToolDefinition(name="user_hello", title="Hello", description="Say hello.", input_model=NoArguments,
                        output_model=Echo, handler=hello)]
"""


def installed_command() -> str:
    found = shutil.which("managed-tools", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("managed-tools is not installed next to this Python: run `pip install -e .` first")
    return found


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project whose own top-level names are the ones our layers used to be installed as."""
    project = tmp_path / "project"
    for package in ("tools", "stores", "sandbox"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(
            f"raise ImportError('the project tree {package} was imported')\n"
        )
    (project / "server.py").write_text("raise SystemExit('the project server.py was run')\n")
    (project / "my_tools.py").write_text(EXTENSION)
    return project


def user_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, **extra}


def test_the_installed_command_lists_the_catalogue_from_a_project_with_its_own_server_and_tools(
    project: Path,
) -> None:
    for argv in ([installed_command()], [sys.executable, "-m", "managed_tools.server"]):
        done = subprocess.run(
            [*argv, "tools", "--json"], cwd=project, env=user_env(PYTHONPATH="."), capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        names = {tool["name"] for tool in json.loads(done.stdout)["tools"]}
        assert {"environment_describe", "bash", "permissions_check"} <= names


async def test_the_installed_server_serves_a_projects_extension_file_without_pythonpath(project: Path) -> None:
    workspace = project / "work"
    workspace.mkdir()
    args = ["serve", "--workspace", str(workspace), "--tools-module", "./my_tools.py"]
    params = StdioServerParameters(command=installed_command(), args=args, env=user_env(), cwd=str(project))
    async with Client(params) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        called = await client.call_tool("user_hello", {})
    assert {"user_hello", "environment_describe"} <= names
    assert called.structured_content == {"said": "hello"}


def test_an_extension_file_that_is_missing_or_shadows_a_loaded_module_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    (tmp_path / "json.py").write_text("TOOLS = []\n")
    expected = {
        str(tmp_path / "absent.py"): "does not exist or is not a file",
        str(tmp_path / "json.py"): "a module named 'json' is already loaded; rename it",
    }
    for module, message in expected.items():
        with pytest.raises(StartupError, match=re.escape(message)):
            startup_extensions(ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=(module,)))
