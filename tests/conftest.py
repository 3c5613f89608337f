"""Shared fixtures: a real workspace on disk, a real SQLite file (or PostgreSQL server), and a real MCP client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult
from postgres_server import SKIP_REASON, TEMPLATE, binaries, database_url, running_server

from managed_tools.server.app import build_server
from managed_tools.server.config import ServeConfig
from managed_tools.server.data_dir import state_root
from managed_tools.server.runtime import open_runtime
from managed_tools.tools.framework.context import Runtime
from managed_tools.tools.framework.definition import ToolDefinition

ERAS = ["auto", "legacy"]  # 2026-07-28 (the SDK default) and the handshake era (2025-11-25)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test touches the person's real state dir: platformdirs reads XDG_STATE_HOME on Linux (subprocesses
    inherit it). The cwd moves too, so a command run without --workspace never adopts the checkout's own
    `.managed-tools`."""
    home = tmp_path_factory.mktemp("state-home")
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))  # the user's own skills directory, the vault key
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")  # never the person's keyring
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    assert state_root().is_relative_to(home), "platformdirs does not honour XDG_STATE_HOME on this platform"
    return home


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


BACKENDS = ["sqlite", "postgresql"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test (or module) marked `both_backends` runs once on SQLite and once on PostgreSQL, unless the test is
    marked `sqlite_only` (a slow subprocess test whose store path another PostgreSQL test already covers)."""
    marked = metafunc.definition.get_closest_marker
    if "backend" in metafunc.fixturenames and marked("both_backends") and not marked("sqlite_only"):
        metafunc.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


def _psql(server: str, sql: str) -> None:
    bin_dir = binaries()
    assert bin_dir is not None
    subprocess.run(
        [str(bin_dir / "psql"), "-v", "ON_ERROR_STOP=1", "-qc", sql, server], check=True, capture_output=True
    )


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL cluster for the whole run; skipped where PostgreSQL is absent, except in CI."""
    if binaries() is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs every store test on PostgreSQL too: {SKIP_REASON}")
        pytest.skip(SKIP_REASON)
    with running_server() as server:
        _psql(server, f"CREATE DATABASE {TEMPLATE}")
        # In its own process: this may be set up while a test's event loop runs.
        migrate = "import anyio, pathlib, sys; from managed_tools.stores.db import Database\n" \
            "async def main():\n    await (await Database.open(sys.argv[1], local_dir=pathlib.Path('.'))).close()\n" \
            "anyio.run(main)"  # fmt: skip
        subprocess.run([sys.executable, "-c", migrate, database_url(server, TEMPLATE)], check=True, timeout=120)
        yield server


@pytest.fixture
def database(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test's state lives: a fresh SQLite file, or a fresh (already migrated) PostgreSQL database."""
    if backend == "sqlite":
        return tmp_path / "state.db"
    server: str = request.getfixturevalue("postgres_server")
    name = f"test_{uuid.uuid4().hex[:16]}"
    _psql(server, f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    return database_url(server, name)


@pytest.fixture
def database_option(backend: str, request: pytest.FixtureRequest) -> str | None:
    """What `--database` a test's server gets: None (SQLite in the data dir), or a fresh PostgreSQL database."""
    return None if backend == "sqlite" else str(request.getfixturevalue("database"))


@pytest.fixture
def config(workspace: Path, database_option: str | None) -> ServeConfig:
    return ServeConfig.build(workspace=workspace, data_dir=None, database=database_option)


@pytest.fixture
async def runtime(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as rt:
        yield rt


Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def connect() -> Connect:
    """`connect(runtime, mode=..., session_id=...)`: an in-process client attached to a fresh wake."""

    @asynccontextmanager
    async def _connect(
        runtime: Runtime, mode: str = "auto", session_id: str | None = None, **kwargs: Any
    ) -> AsyncIterator[Client]:
        server = build_server(runtime, transport="memory", session_id=session_id)
        async with Client(server, mode=mode, **kwargs) as client:
            yield client

    return _connect


@asynccontextmanager
async def runtime_with(config: ServeConfig, *tools: ToolDefinition) -> AsyncIterator[Runtime]:
    async with open_runtime(config, extra_tools=tools) as rt:
        yield rt


def data(result: CallToolResult) -> dict[str, Any]:
    """The structured result of a successful call, checked against its text twin: the same JSON, or for `read`
    the file's text under a line saying what is shown (tools/files/tools.py `shown_text`)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    text = result.content[0]
    assert text.type == "text"
    structured: dict[str, Any] = result.structured_content
    if {"showing", "content", "mountPath"} <= set(structured):
        assert text.text.startswith(f"{structured['path']}: {structured['showing']}")
        assert text.text.endswith(structured["content"])
    else:
        assert json.loads(text.text) == structured
    return structured


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    text = result.content[0]
    assert text.type == "text"
    return text.text


@pytest.fixture(autouse=True, scope="session")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """No test touches the person's real cache dir, where the confinement launcher is built: one cache for the
    whole run (so the launcher is compiled once), inherited by subprocesses."""
    home = tmp_path_factory.mktemp("cache-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(home))
        yield home


def alive(marker: str) -> bool:
    """Whether a live (not zombie) process on the host has `marker` as one of its arguments. Spawned programs run in
    PID namespaces of their own, so the pid a command sees of itself names nothing out here: tests find them by
    an argument only they use (`sleep 30.125`)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                found = marker.encode() in cmdline.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as stat:
                zombie = stat.read().rsplit(")", 1)[-1].split()[0] == "Z"
        except OSError:
            continue
        if found and not zombie:
            return True
    return False


async def gone(marker: str, within: float = 3.0) -> bool:
    """Whether every process with `marker` among its arguments ends within `within` seconds."""
    with anyio.move_on_after(within):
        while alive(marker):  # noqa: ASYNC110 (polling the kernel's process table)
            await anyio.sleep(0.05)
        return True
    return False


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback TCP port something listens on: a sandboxed connect to it must fail."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]
