"""Loopback HTTP has a bearer token by default (issue 23 N3): made once, kept 0600 in the data dir, the same at every
start, printed at start-up with a ready client configuration; going without one is an explicit `--no-token`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from anyio.streams.text import TextReceiveStream
from conftest import ERAS, data
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from test_http import INITIALIZE, POST_HEADERS, SERVE

from managed_tools.server.cli.command import main
from managed_tools.server.config.data_dir import default_data_dir
from managed_tools.server.http.token import TOKEN_FILE

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def started(workspace: Path, *extra: str, lines: int = 3) -> AsyncIterator[list[str]]:
    """`serve --transport http --port 0` as a subprocess, and the first `lines` lines it wrote on stderr."""
    env = {k: v for k, v in os.environ.items() if k != "MANAGED_TOOLS_TOKEN"}
    argv = [*SERVE, "--workspace", str(workspace), "--transport", "http", "--port", "0", *extra]
    async with await anyio.open_process(argv, stdin=subprocess.DEVNULL, env=env) as proc:
        assert proc.stderr is not None
        stderr = TextReceiveStream(proc.stderr)
        seen = ""
        try:
            with anyio.fail_after(60):
                while seen.count("\n") < lines:
                    seen += await stderr.receive()
            yield seen.splitlines()
        finally:
            proc.terminate()
            with anyio.move_on_after(15):
                await proc.wait()


@pytest.fixture
def kept(workspace: Path) -> Path:
    """Where the server keeps the token it made for this workspace."""
    return default_data_dir(workspace.resolve()) / TOKEN_FILE


async def test_loopback_http_has_a_kept_token_by_default(workspace: Path, kept: Path) -> None:
    async with started(workspace) as lines:
        assert "every request needs the bearer token" in lines[0]
        token = (await anyio.Path(kept).read_text()).strip()
        assert lines[1] == f"managed-tools: bearer token (kept in {kept}, the same at every start): {token}"
        config = json.loads(lines[2].removeprefix("managed-tools: client config: "))
        url = lines[0].split("Streamable HTTP at ")[1].split(",")[0]
        assert config == {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
        async with httpx2.AsyncClient() as http:
            missing = await http.post(url, json=INITIALIZE, headers=POST_HEADERS)
            forged = {**POST_HEADERS, "Authorization": "Bearer " + "x" * 43}
            wrong = await http.post(url, json=INITIALIZE, headers=forged)
        for mode in ERAS:  # the printed configuration is all a client needs
            async with (
                httpx2.AsyncClient(headers=config["headers"]) as http,
                Client(streamable_http_client(url, http_client=http), mode=mode) as client,
            ):
                data(await client.call_tool("environment_describe", {}))
    assert (missing.status_code, wrong.status_code) == (401, 401)
    info = await anyio.Path(kept).stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
    assert len(token) >= 32
    async with started(workspace) as again:  # reused at the next start
        assert again[1].endswith(f": {token}")


async def test_no_token_is_an_explicit_opt_out(workspace: Path, kept: Path) -> None:
    async with started(workspace, "--no-token", lines=1) as lines:
        assert "no token (--no-token; loopback only)" in lines[0]
        url = lines[0].split("Streamable HTTP at ")[1].split(",")[0]
        async with Client(url) as client:
            data(await client.call_tool("environment_describe", {}))
    assert not kept.exists()  # noqa: ASYNC240 (the server has stopped)


def test_the_opt_out_is_loopback_only_and_never_beside_a_token(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MANAGED_TOOLS_TOKEN", raising=False)
    serve = ["serve", "--workspace", str(workspace), "--transport", "http", "--no-token"]
    assert main([*serve, "--host", "0.0.0.0"]) == 2
    assert "exposes the server beyond this machine" in capsys.readouterr().err
    monkeypatch.setenv("MANAGED_TOOLS_TOKEN", "t" * 24)
    assert main(serve) == 2
    assert "--no-token contradicts MANAGED_TOOLS_TOKEN or --token-file" in capsys.readouterr().err
    assert "RISKY" in subprocess.run([*SERVE, "--help"], capture_output=True, text=True, check=True).stdout


def test_a_kept_token_others_can_read_is_refused(
    workspace: Path, kept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept.parent.mkdir(parents=True)
    kept.write_text("a-token-that-others-could-read\n")
    kept.chmod(0o644)
    assert main(["serve", "--workspace", str(workspace), "--transport", "http"]) == 2
    err = capsys.readouterr().err
    assert f"chmod 600 {kept}" in err and "delete it" in err and "a-token-that" not in err
