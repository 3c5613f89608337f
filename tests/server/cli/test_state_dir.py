"""State outside every mount: the default data dir, refusals of overlapping dirs, and `adopt` of the old one."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import anyio
import pytest
from conftest import Connect, data, error_text

from managed_tools.server.config.data_dir import LEGACY_DIR, default_data_dir, move_into_place, state_root
from managed_tools.server.config.serve_config import ConfigError, ServeConfig
from managed_tools.server.runtime.opening import open_runtime

CLI = [sys.executable, "-m", "managed_tools.server"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], check=False, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def refused(out: subprocess.CompletedProcess[str], *words: str) -> None:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert out.stderr.startswith("managed-tools: ") and out.stderr.count("\n") == 1, out.stderr
    for word in words:
        assert word in out.stderr


def counts(state_db: Path) -> dict[str, int]:
    with sqlite3.connect(state_db) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("sessions", "wakes", "events")}


def legacy_state(workspace: Path, scratch: Path, connect: Connect) -> dict[str, int]:
    """`<workspace>/.managed-tools` as the old default left it: a real database with rows, some of them still in
    the WAL file (copied while another connection kept SQLite from checkpointing)."""
    config = ServeConfig.build(workspace=workspace, data_dir=scratch)

    async def fill() -> sqlite3.Connection:
        async with open_runtime(config) as runtime:
            holder = sqlite3.connect(config.state_path)
            holder.execute("SELECT count(*) FROM sessions").fetchone()
            async with connect(runtime) as client:
                data(await client.call_tool("environment_describe", {}))
            return holder

    holder = anyio.run(fill)
    rows = counts(config.state_path)
    shutil.copytree(scratch, workspace / LEGACY_DIR)
    holder.close()
    assert (workspace / LEGACY_DIR / "state.db-wal").stat().st_size > 0
    assert rows["sessions"] >= 1 and rows["events"] >= 2
    return rows


# ---- the default -----------------------------------------------------------------------------------------------


def test_default_is_outside_the_workspace_and_keyed_by_it(workspace: Path, tmp_path: Path, state_home: Path) -> None:
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    assert config.data_dir.parent == state_home / "managed-tools" / "workspaces" == state_root()
    assert config.data_dir.name.startswith("workspace-") and len(config.data_dir.name) == len("workspace-") + 16
    assert not config.data_dir.is_relative_to(workspace) and not config.state_path.is_relative_to(workspace)
    # The same workspace, however it is named, always maps to the same dir.
    (tmp_path / "alias").symlink_to(workspace, target_is_directory=True)
    assert ServeConfig.build(workspace=tmp_path / "alias", data_dir=None).data_dir == config.data_dir
    assert ServeConfig.build(workspace=workspace / ".." / "workspace", data_dir=None).data_dir == config.data_dir
    # Two workspaces never share one, not even with the same name.
    twin = tmp_path / "elsewhere" / "workspace"
    twin.mkdir(parents=True)
    assert ServeConfig.build(workspace=twin, data_dir=None).data_dir not in (config.data_dir, None)
    odd = tmp_path / "my project (v2)!"
    odd.mkdir()
    assert default_data_dir(odd.resolve()).name.startswith("my-project-v2-")
    assert default_data_dir(Path("/")).name.startswith("root-")


def test_data_dir_option_still_overrides(workspace: Path, tmp_path: Path) -> None:
    chosen = tmp_path / "workspace-state"  # a string prefix of the workspace's path, yet outside it
    assert ServeConfig.build(workspace=workspace, data_dir=chosen).data_dir == chosen


def test_help_describes_the_default() -> None:
    helped = run("serve", "--help")
    assert helped.returncode == 0
    assert f"State lives by default in {state_root()}/<workspace name>-<hash of its path>\n" in helped.stdout
    assert "one directory per workspace, outside every mount" in helped.stdout


def test_the_data_dir_is_shown_at_info_level_on_stderr(workspace: Path) -> None:
    out = run("serve", "--workspace", str(workspace), "--log-level", "INFO")  # stdin at EOF: serves, then stops
    assert out.returncode == 0, out.stderr
    assert f"data dir {default_data_dir(workspace.resolve())}" in out.stderr and out.stdout == ""


# ---- refusals ----------------------------------------------------------------------------------------------------


def test_data_dir_inside_the_workspace_is_refused(workspace: Path) -> None:
    for inside in (workspace / "state", workspace / LEGACY_DIR, workspace):
        refused(
            run("serve", "--workspace", str(workspace), "--data-dir", str(inside)), "inside the workspace", "--data-dir"
        )
    assert sorted(p.name for p in workspace.iterdir()) == []  # refused before anything was created
    # The human commands share the rule.
    refused(run("pending", "--workspace", str(workspace), "--data-dir", str(workspace / "s")), "--data-dir")


def test_data_dir_reaching_the_workspace_through_a_symlink_is_refused(workspace: Path, tmp_path: Path) -> None:
    (workspace / "hidden").mkdir()
    (tmp_path / "innocent").symlink_to(workspace / "hidden", target_is_directory=True)
    refused(
        run("serve", "--workspace", str(workspace), "--data-dir", str(tmp_path / "innocent")), "inside the workspace"
    )


def test_workspace_inside_the_data_dir_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "project").mkdir(parents=True)
    refused(run("serve", "--workspace", str(state / "project"), "--data-dir", str(state)), "inside the data dir")


def test_data_dir_inside_a_vault_is_refused(workspace: Path, tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    out = run("serve", "--workspace", str(workspace), "--vault", f"docs={vault}", "--data-dir", str(vault / "state"))
    refused(out, "inside the vault 'docs'", "--data-dir")
    # A vault declared in config.json counts as much as one on the command line, either way round.
    data_dir = tmp_path / "state"
    data_dir.mkdir()
    (data_dir / "config.json").write_text(json.dumps({"vaults": {"all": str(tmp_path)}}))
    with pytest.raises(ConfigError, match="inside the vault 'all'"):
        ServeConfig.build(workspace=workspace, data_dir=data_dir)


# ---- moving the old default --------------------------------------------------------------------------------------


def test_the_old_data_dir_moves_only_by_adopt_with_its_rows(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    rows = legacy_state(workspace, tmp_path / "scratch", connect)
    (workspace / LEGACY_DIR / "agents" / "default" / "substrate" / "SOUL.md").write_text("kept\n")
    legacy, new = (workspace / LEGACY_DIR).resolve(), default_data_dir(workspace.resolve())
    out = run("pending", "--workspace", str(workspace))  # it reads no state from the old dir
    assert f"ignoring {legacy}" in out.stderr and "No state database at" in out.stderr, out.stderr
    assert legacy.is_dir() and not new.exists()
    moved = run("adopt", "--workspace", str(workspace), "--yes")
    assert moved.returncode == 0, moved.stderr
    assert f"Moved {legacy} to {new}." in moved.stdout
    assert not legacy.exists() and counts(new / "state.db") == rows
    assert (new / "agents" / "default" / "substrate" / "SOUL.md").read_text() == "kept\n"
    again = run("pending", "--workspace", str(workspace))
    assert again.returncode == 0 and again.stderr == ""


def test_adopt_never_merges_into_an_existing_data_dir(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    new = default_data_dir(workspace.resolve())

    async def create() -> None:
        async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=None)):
            pass  # the new dir exists with an empty database

    anyio.run(create)
    legacy_state(workspace, tmp_path / "scratch", connect)
    before = counts(new / "state.db")
    out = run("adopt", "--workspace", str(workspace), "--yes")
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "never merges" in out.stderr, out.stderr
    assert (workspace / LEGACY_DIR / "state.db").exists() and counts(new / "state.db") == before


@pytest.mark.anyio
async def test_an_old_data_dir_left_in_place_stays_out_of_reach(left_behind: ServeConfig, connect: Connect) -> None:
    async with open_runtime(left_behind) as runtime, connect(runtime) as client:
        for path in (f"{LEGACY_DIR}/state.db", f"{LEGACY_DIR}/config.json"):
            assert "own data directory" in error_text(await client.call_tool("read", {"path": path}))
        listed = data(await client.call_tool("glob", {"pattern": "**/*"}))
        found = data(await client.call_tool("grep", {"query": "SQLite"}))
    assert LEGACY_DIR not in json.dumps(listed) and LEGACY_DIR not in json.dumps(found)


@pytest.fixture
def left_behind(workspace: Path) -> ServeConfig:
    """Both the new data dir and an old `.managed-tools` (holding what looks like state) exist."""
    default_data_dir(workspace.resolve()).mkdir(parents=True)
    (workspace / LEGACY_DIR).mkdir()
    (workspace / LEGACY_DIR / "state.db").write_bytes(b"SQLite format 3\x00")
    (workspace / LEGACY_DIR / "config.json").write_text("{}")
    notices: list[str] = []
    config = ServeConfig.build(workspace=workspace, data_dir=None, notify=notices.append)
    assert len(notices) == 1 and "ignoring" in notices[0]
    return config


def same_device(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


@pytest.mark.parametrize("across", [False, True], ids=["rename", "copy-across-filesystems"])
def test_racing_moves_lose_nothing(tmp_path: Path, connect: Connect, across: bool) -> None:
    """Eight threads move the same old dir at once (two people adopting); across filesystems the copy+rename path
    runs."""
    base = Path("/dev/shm") if across else tmp_path
    if across and (not base.is_dir() or same_device(base, tmp_path)):
        pytest.skip("no second filesystem (/dev/shm) to move across")
    workspace = Path(tempfile.mkdtemp(dir=base, prefix="mt-workspace-"))
    try:
        rows = legacy_state(workspace, tmp_path / "scratch", connect)
        target = tmp_path / "state" / "ws-0123456789abcdef"
        moved: list[bool] = []
        gate = threading.Barrier(8)

        errors: list[BaseException] = []

        def adopt() -> None:
            gate.wait()
            try:
                moved.append(move_into_place(workspace / LEGACY_DIR, target))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=adopt) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [] and moved.count(True) == 1, (errors, moved)
        assert not (workspace / LEGACY_DIR).exists() and counts(target / "state.db") == rows
        assert [p.name for p in target.parent.iterdir()] == [target.name]
    finally:
        shutil.rmtree(workspace)


# ---- nothing a tool does reaches the database ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_database_is_outside_every_mount(mounted: ServeConfig, connect: Connect) -> None:
    config, db = mounted, mounted.state_path
    async with open_runtime(config) as runtime, connect(runtime) as client:
        mounts = {m.kind: m.root for m in runtime.guard.mounts}
        assert all(not db.is_relative_to(root) for root in mounts.values())
        # The substrate is reachable on its own: its mount root is its own dir inside the data dir.
        assert mounts["agent_substrate"].is_relative_to(config.data_dir)
        (mounts["agent_substrate"] / "SOUL.md").write_text("soul\n")
        assert "soul" in data(await client.call_tool("read", {"path": "/workspace/agent/SOUL.md"}))["content"]
        (config.workspace / "db-link").symlink_to(db)
        for path in (
            "db-link",
            f"{LEGACY_DIR}/state.db",
            "/workspace/agent/../../state.db",
            "agent/../state.db",
        ):
            assert str(config.data_dir) not in error_text(await client.call_tool("read", {"path": path}))
        assert "outside the mounts" in error_text(await client.call_tool("read", {"path": str(db)}))
        for root in ("/workspace", "/workspace/agent"):
            assert data(await client.call_tool("glob", {"pattern": "**/state.db*", "path": root}))["matches"] == []
        described = await client.call_tool("environment_describe", {})
        assert str(config.data_dir) not in str(described) and str(state_root()) not in str(described)


@pytest.fixture
def mounted(workspace: Path, tmp_path: Path) -> ServeConfig:
    """A server with a workspace and a vault; every path in it is real (tmp_path has no symlinks here)."""
    vault = tmp_path / "vault"
    vault.mkdir()
    config = ServeConfig.build(workspace=workspace, data_dir=None, vaults={"docs": vault})
    assert Path(os.path.realpath(config.state_path)) == config.state_path
    return config
