"""The first real command works (issue 35): through a real MCP client over stdio, with no grant configured, the
project's own toolchain runs in the sandbox as a developer would run it (`python -m pytest -q` in a venv made from
a pyenv Python and from the system's, `pip install -e .` into it, `npm test` with a local tool, `go test ./...`,
`cargo test --offline`), and the same commands still cannot read a planted `~/.ssh/id_ed25519` nor write outside
the workspace and their private dirs. An upstream started from the workspace venv needs no `readPaths`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import data
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from support.toolchain_fixtures import SYSTEM_PYTHON, project_venv, pyenv_home
from test_permissions import answer

from managed_tools.sandbox import landlock
from managed_tools.sandbox.toolchains import VARIABLES
from managed_tools.server.config.data_dir import default_data_dir

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(landlock.abi() == 0, reason="this kernel offers no Landlock"),
    pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason=f"no {SYSTEM_PYTHON} to build the installs from"),
]
CANARY = "canary-private-key-35"
TESTS = Path(__file__).parents[2]
UPSTREAM = """import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "venv", "version": "1"}}
    elif msg["method"] == "tools/list":
        tool = {"name": "prefix", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
        result = {"tools": [tool]}
    elif msg["method"] == "tools/call":
        result = {"content": [{"type": "text", "text": sys.prefix}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The person's home: pyenv with one real install, behind shims that cannot run; a private key."""
    where = tmp_path / "home"
    pyenv_home(where)
    (where / ".ssh").mkdir(mode=0o700)
    (where / ".ssh" / "id_ed25519").write_text(CANARY)
    return where


def python_project(workspace: Path, python: Path) -> None:
    project_venv(python, workspace / ".venv")
    (workspace / "test_demo.py").write_text("import demo\n\ndef test_demo():\n    assert demo.VALUE == 35\n")
    (workspace / "demo.py").write_text("VALUE = 35\n")
    (workspace / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "demo"\nversion = "0.1"\n\n[tool.setuptools]\npy-modules = ["demo"]\n'
    )


def other_projects(workspace: Path) -> None:
    """npm, Go and Rust projects in the same directory, each with one test."""
    tool = workspace / "node_modules" / ".bin" / "check-demo"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho demo checked\n")
    tool.chmod(0o755)
    (workspace / "package.json").write_text(json.dumps({"name": "demo", "version": "0.1.0",
                                                        "scripts": {"test": "check-demo"}}))  # fmt: skip
    (workspace / "go.mod").write_text("module example.com/demo\n\ngo 1.19\n")
    (workspace / "demo_test.go").write_text(
        'package demo\n\nimport "testing"\n\nfunc TestDemo(t *testing.T) {\n\tif 6*7 != 42 {\n\t\tt.Fatal()\n\t}\n}\n'
    )
    (workspace / "Cargo.toml").write_text('[package]\nname = "demo"\nversion = "0.1.0"\nedition = "2021"\n')
    (workspace / "src").mkdir()
    (workspace / "src" / "lib.rs").write_text("#[test]\nfn demo() {\n    assert_eq!(6 * 7, 42);\n}\n")


def server_env(home: Path) -> dict[str, str]:
    """The server as the person starts it: pyenv's shims and the server's own venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    own = str(Path(sys.executable).parent)
    env |= {"HOME": str(home), "PATH": os.pathsep.join([own, str(home / ".pyenv" / "shims"), "/usr/bin", "/bin"])}
    return env | {"PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}


@asynccontextmanager
async def serving(workspace: Path, home: Path, *, auto: bool) -> AsyncIterator[tuple[Client, list[str]]]:
    asked: list[str] = []
    args = ["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--shell-network", "off"]
    params = StdioServerParameters(command=sys.executable, args=[*args, *(["--auto-sandboxed"] if auto else [])],
                                   env=server_env(home))  # fmt: skip
    approves: Any = answer("accept", {"approve": True}, asked)
    async with Client(params, mode="legacy", elicitation_callback=approves) as client:
        yield client, asked


async def run(client: Client, command: str) -> dict[str, Any]:
    return data(await client.call_tool("shell_run", {"command": command, "timeoutMs": 240_000}))


async def cannot_escape(client: Client, home: Path, workspace: Path) -> None:
    read = await run(client, f"cat {home}/.ssh/id_ed25519; python -c 'print(open(\"{home}/.ssh/id_ed25519\").read())'")
    wrote = await run(client, f"touch {home}/planted; touch {workspace.parent}/planted")
    assert CANARY not in read["stdout"] + read["stderr"] and read["exitCode"] != 0, read
    assert wrote["exitCode"] != 0 and not (home / "planted").exists() and not (workspace.parent / "planted").exists()


def ran(result: dict[str, Any], *expected: str) -> None:
    shown = f"exit {result['exitCode']}: {result['stdout']}{result['stderr']}"
    assert result["exitCode"] == 0 and all(text in result["stdout"] + result["stderr"] for text in expected), shown


@pytest.mark.parametrize("auto", [True, False], ids=["auto-sandboxed", "approved"])
async def test_a_pyenv_venv_pip_npm_go_and_cargo_run_as_written(home: Path, workspace: Path, auto: bool) -> None:
    python_project(workspace, home / ".pyenv" / "versions" / "3.11.99" / "bin" / "python3")
    other_projects(workspace)
    commands = [
        ("python -m pytest -q -p no:cacheprovider", "1 passed"),
        ("pip install -q -e . --no-build-isolation --no-index --no-deps", ""),
        ("cd \"$HOME\" && python -c 'import demo; print(demo.__file__)'", "/workspace/demo.py"),  # installed
        ("npm test", "demo checked"),
        *([("go test ./...", "ok")] if shutil.which("go", path="/usr/bin") else []),
        *([("cargo test --offline -q", "test result: ok")] if shutil.which("cargo", path="/usr/bin") else []),
    ]  # fmt: skip
    async with serving(workspace, home, auto=auto) as (client, asked):
        for command, expected in commands:
            ran(await run(client, command), expected)
        await cannot_escape(client, home, workspace)
    assert len(asked) == (0 if auto else len(commands) + 2), asked  # a person asked once per command, if at all
    assert not any((home / where).exists() for where in (".cache", ".npm", "go", ".cargo", "planted"))


async def test_a_system_python_venv_runs_its_tests(home: Path, workspace: Path) -> None:
    python_project(workspace, SYSTEM_PYTHON)
    async with serving(workspace, home, auto=True) as (client, asked):
        ran(await run(client, "python -m pytest -q -p no:cacheprovider"), "1 passed")
        activated = await run(client, 'echo "$VIRTUAL_ENV"; command -v python')
        ran(activated, "/workspace/.venv\n/workspace/.venv/bin/python")
        persistent = await client.call_tool("shell_exec", {"command": "python -m pytest -q -p no:cacheprovider"})
        ran(data(persistent), "1 passed")  # the persistent shell's PATH is the same
        await cannot_escape(client, home, workspace)
    assert asked == []


async def test_an_upstream_in_the_workspace_venv_starts_with_no_read_paths(home: Path, workspace: Path) -> None:
    project_venv(home / ".pyenv" / "versions" / "3.11.99" / "bin" / "python3", workspace / ".venv")
    (workspace / "server.py").write_text(UPSTREAM)
    data_dir = default_data_dir(workspace)
    data_dir.mkdir(parents=True, exist_ok=True)
    upstream = {"command": "python", "args": ["server.py"]}
    (data_dir / "config.json").write_text(json.dumps({"mcpServers": {"venv": upstream}}))
    async with serving(workspace, home, auto=True) as (client, _):
        with anyio.fail_after(60):
            while "venv__prefix" not in {t.name for t in (await client.list_tools()).tools}:  # noqa: ASYNC110
                await anyio.sleep(0.2)
        answered = await client.call_tool("venv__prefix", {})
    assert not answered.is_error and str(workspace / ".venv") in str(answered.content), answered
