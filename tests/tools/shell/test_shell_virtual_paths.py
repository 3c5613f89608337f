"""Virtual paths (/workspace/...) in shell commands: mapped through the path guard to the real mount, shown as
written, refused when they climb out or a shell would misread the real path."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Connect, data, error_text
from hypothesis import given, settings
from hypothesis import strategies as st
from test_permissions import answer

from managed_tools.sandbox.mounts import Mount
from managed_tools.sandbox.paths import PathGuard
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.shell.virtual_paths import map_virtual_paths

pytestmark = pytest.mark.anyio


async def test_virtual_paths_in_shell_commands_are_mapped_through_the_guard(
    runtime: Runtime, connect: Connect, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "docs").mkdir()
    (workspace / "docs" / "guide.md").write_text("hello\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (workspace / "out").symlink_to(outside)
    asked: list[str] = []
    async with connect(runtime, "legacy", elicitation_callback=answer("accept", {"approve": True}, asked)) as client:
        pwd = data(await client.call_tool("shell_run", {"command": "pwd"}))
        listed = data(await client.call_tool("shell_run", {"command": "cd /workspace/docs && ls && pwd"}))
        exec_ = data(
            await client.call_tool("shell_exec", {"command": 'cat "/workspace/docs/guide.md"; cd /workspace/docs'})
        )
        moved = data(await client.call_tool("shell_exec", {"command": "pwd"}))
        look_alike = data(
            await client.call_tool("shell_run", {"command": "echo /workspacefoo '~/workspace' x/workspace"})
        )
        asked_before = len(asked)
        climbing = await client.call_tool("shell_run", {"command": "cat /workspace/../outside/secret.txt"})
        through_link = await client.call_tool("shell_exec", {"command": "cat /workspace/out/secret.txt"})
    assert pwd["stdout"] == "/workspace\n"
    assert listed["stdout"] == "guide.md\n/workspace/docs\n" and listed["exitCode"] == 0
    assert listed["command"] == "cd /workspace/docs && ls && pwd"  # shown as written, never the real path
    assert exec_["stdout"] == "hello\n" and moved["stdout"] == "/workspace/docs\n"
    assert look_alike["stdout"] == "/workspacefoo ~/workspace x/workspace\n"  # not paths of a mount: left alone
    assert "climbs out with '..'" in error_text(climbing) and "Nothing ran" in error_text(climbing)
    assert "resolves outside /workspace" in error_text(through_link)
    assert len(asked) == asked_before  # refused before a person was asked
    assert all(str(workspace) not in text for text in asked)


def _guard(root: Path) -> PathGuard:
    mount = Mount(kind="workspace", mount_path="/workspace", root=root, access="read_write", scope="agent", prompt="")
    return PathGuard([mount], [])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("/workspace.~$ '\"=:;|&()x\n")), max_size=60))
def test_mapping_only_ever_swaps_a_mount_prefix(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    root = tmp_path_factory.getbasetemp() / "mapped-root"
    root.mkdir(exist_ok=True)
    try:
        mapped = map_virtual_paths(_guard(root), text)
    except ToolError as exc:
        assert "Nothing ran" in str(exc)
        return
    assert mapped.replace(str(root.resolve()), "/workspace") == text


def test_a_mount_whose_real_path_a_shell_would_misread_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "my ws"
    root.mkdir()
    with pytest.raises(ToolError, match="cannot be mapped into the command text"):
        map_virtual_paths(_guard(root), "ls /workspace")
    assert map_virtual_paths(_guard(root), "ls docs") == "ls docs"  # nothing to map: runs as written
