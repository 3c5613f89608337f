"""Upstream MCP servers behind our gate (issue 15 item 1): a real Python SDK server (tests/support/upstream_server.py)
run as a subprocess over stdio, confined, and over Streamable HTTP; reached through a real `mcp.Client` to our
server in both eras."""

from __future__ import annotations

import json
import logging
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, alive, data, error_text, gone, upstreams_started
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.session import IncomingMessage
from pydantic import SecretStr

from managed_tools.server.config.serve_config import ConfigError, ServeConfig
from managed_tools.server.config.upstream_spec import StdioUpstream
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.server.upstream.log_repeats import RepeatFilter
from managed_tools.server.upstream.remembered import spec_hash
from managed_tools.server.upstream.secrets import SecretLookup
from managed_tools.server.upstream.tools import definitions
from managed_tools.stores import vault
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.errors import RegistryError

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parents[2]
SERVER = TESTS / "support" / "upstream_server.py"
# The interpreter and the test server live outside the system directories: the upstream may read and run them.
PROGRAM = {"readPaths": sorted({sys.prefix, sys.base_prefix, str(TESTS)})}
PROBE = {"command": sys.executable, "args": [str(SERVER)], **PROGRAM}
YES = {"approve": True}


def configured(workspace: Path, data_dir: Path, servers: dict[str, Any], **extra: Any) -> ServeConfig:
    data_dir.mkdir(exist_ok=True)
    (data_dir / "config.json").write_text(json.dumps({"mcpServers": servers, **extra}), encoding="utf-8")
    return ServeConfig.build(workspace=workspace, data_dir=data_dir)


@asynccontextmanager
async def serving(
    workspace: Path, tmp_path: Path, servers: dict[str, Any], secrets: SecretLookup | None = None, **extra: Any
) -> AsyncIterator[Runtime]:
    async with open_runtime(configured(workspace, tmp_path / "data", servers, **extra), secrets=secrets) as rt:
        await upstreams_started(rt, *servers)
        yield rt


@asynccontextmanager
async def client_for(rt: Runtime, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    async with Client(build_server(rt, transport="memory", approval_wait_seconds=5), mode=mode, **kwargs) as client:
        yield client


@asynccontextmanager
async def probe_client(workspace: Path, tmp_path: Path, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    """A client of our server, which serves the probe upstream."""
    async with serving(workspace, tmp_path, {"probe": PROBE}) as rt, client_for(rt, mode, **kwargs) as client:
        yield client


def answering(action: str, content: dict[str, Any] | None = None, seen: list[str] | None = None) -> Callable[
    [ClientRequestContext, types.ElicitRequestParams], Awaitable[types.ElicitResult]
]:  # fmt: skip
    async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        if seen is not None:
            seen.append(params.message)
        return types.ElicitResult(action=action, content=content)

    return on_elicit


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result.content
    first = result.content[0]
    assert first.type == "text"
    return first.text


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_are_published_with_prefix_ownership_schema_and_policy(
    workspace: Path, tmp_path: Path, mode: str
) -> None:
    async with serving(workspace, tmp_path, {"probe": PROBE}) as rt, client_for(rt, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"probe__echo", "probe__write_file", "probe__image", "probe__grow", "probe__crash"} <= set(tools)
    echo, write = tools["probe__echo"], tools["probe__write_file"]
    assert echo.input_schema["properties"]["text"]["type"] == "string"  # the upstream's schema, as it wrote it
    assert echo.input_schema["required"] == ["text"]
    assert echo.annotations is not None and echo.annotations.read_only_hint is True
    assert write.annotations is not None and write.annotations.read_only_hint is False
    meta = {name: (tool.meta or {})["managed-tools/tool"] for name, tool in tools.items() if "__" in name}
    assert {m["ownership"] for m in meta.values()} == {"mcp"}
    assert "permissionPolicy" not in meta["probe__echo"]  # always_allow, the default
    assert meta["probe__write_file"]["permissionPolicy"] == "always_ask"
    assert meta["probe__grow"]["permissionPolicy"] == "always_ask"  # no readOnlyHint: it asks


@pytest.mark.parametrize("mode", ERAS)
async def test_a_read_only_tool_runs_without_asking_and_is_recorded(workspace: Path, tmp_path: Path, mode: str) -> None:
    asked: list[str] = []
    callback = answering("decline", seen=asked)
    async with probe_client(workspace, tmp_path, mode, elicitation_callback=callback) as client:
        assert "echo: hi" in text_of(await client.call_tool("probe__echo", {"text": "hi"}))
        bad = await client.call_tool("probe__echo", {"text": 3})
        got = await client.call_tool("session_get_events", {"limit": 50})
    assert asked == []
    assert "Invalid arguments for probe__echo" in error_text(bad)  # our validation, against the upstream's schema
    spans = [(e["type"], e["payload"]) for e in (got.structured_content or {})["events"]]
    echo = [payload for kind, payload in spans if payload.get("toolName") == "probe__echo"]
    assert echo[0]["ownership"] == "mcp" and echo[0]["args"] == {"text": "hi"}
    assert [p.get("result") for p in echo[1::2]] == ["success", "error"]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_writing_tool_waits_for_a_person(workspace: Path, tmp_path: Path, mode: str) -> None:
    target = workspace / "note.txt"
    args = {"path": str(target), "text": "hello"}
    seen: list[str] = []
    async with serving(workspace, tmp_path, {"probe": PROBE}) as rt:
        async with client_for(rt, mode, elicitation_callback=answering("decline", seen=seen)) as client:
            denied = await client.call_tool("probe__write_file", args)
        assert "denied" in error_text(denied) and not target.exists()
        assert "probe__write_file" in seen[0] and str(target) in seen[0]
        async with client_for(rt, mode, elicitation_callback=answering("accept", YES)) as client:
            assert "wrote 5 characters" in text_of(await client.call_tool("probe__write_file", args))
    assert target.read_text() == "hello"


async def test_a_policy_entry_overrides_an_upstream_tool(workspace: Path, tmp_path: Path) -> None:
    target = workspace / "free.txt"
    policy = {"probe__write_file": "always_allow"}
    async with serving(workspace, tmp_path, {"probe": PROBE}, policy=policy) as rt, client_for(rt, "legacy") as client:
        text_of(await client.call_tool("probe__write_file", {"path": str(target), "text": "x"}))
    assert target.read_text() == "x"


@pytest.mark.parametrize("mode", ERAS)
async def test_an_image_comes_back_as_image_content(workspace: Path, tmp_path: Path, mode: str) -> None:
    """Stored as an attachment of the session, as our own tools' images are: image content and a resource link."""
    async with serving(workspace, tmp_path, {"probe": PROBE}) as rt, client_for(rt, mode) as client:
        result = await client.call_tool("probe__image", {})
        assert not result.is_error
        [link] = [block for block in result.content if isinstance(block, types.ResourceLink)]
        stored = await client.read_resource(str(link.uri))
    images = [block for block in result.content if isinstance(block, types.ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/png" and images[0].data.startswith("iVBOR")
    assert str(link.uri).startswith("attachments://") and link.mime_type == "image/png"
    [blob] = stored.contents
    assert isinstance(blob, types.BlobResourceContents) and blob.blob == images[0].data


async def test_list_changed_propagates_in_the_handshake_era(workspace: Path, tmp_path: Path) -> None:
    changed = anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    yes = answering("accept", YES)
    async with probe_client(
        workspace, tmp_path, "legacy", message_handler=on_message, elicitation_callback=yes
    ) as client:
        assert "probe__extra" not in {t.name for t in (await client.list_tools()).tools}
        text_of(await client.call_tool("probe__grow", {}))
        with anyio.fail_after(10):
            await changed.wait()
        assert "probe__extra" in {t.name for t in (await client.list_tools()).tools}
        assert "extra" in text_of(await client.call_tool("probe__extra", {}))


async def test_list_changed_propagates_in_the_2026_era(workspace: Path, tmp_path: Path) -> None:
    yes = answering("accept", YES)
    async with probe_client(workspace, tmp_path, "auto", elicitation_callback=yes) as client:
        async with client.listen(tools_list_changed=True) as events:
            text_of(await client.call_tool("probe__grow", {}))
            with anyio.fail_after(10):
                await events.__aiter__().__anext__()
        assert "probe__extra" in {t.name for t in (await client.list_tools()).tools}


async def test_a_crash_answers_clearly_then_the_upstream_restarts(workspace: Path, tmp_path: Path) -> None:
    yes = answering("accept", YES)
    async with probe_client(workspace, tmp_path, "legacy", elicitation_callback=yes) as client:
        assert not (await client.call_tool("probe__pid", {})).is_error
        crashed = error_text(await client.call_tool("probe__crash", {}))
        assert "upstream 'probe' stopped during crash" in crashed
        meanwhile = error_text(await client.call_tool("probe__pid", {}))
        assert "upstream 'probe' stopped and is restarting; try again in 1 s" in meanwhile
        await anyio.sleep(1)  # the first backoff
        with anyio.fail_after(15):
            while (result := await client.call_tool("probe__pid", {})).is_error:  # noqa: ASYNC110 (polling a peer)
                await anyio.sleep(0.2)
        # It answers again, so a new process runs (not told by its pid: each starts as PID 2 of its own namespace).
        assert text_of(result).isascii()


async def test_a_bad_upstream_blocks_neither_start_up_nor_the_others(workspace: Path, tmp_path: Path) -> None:
    servers = {"broken": {"command": str(tmp_path / "no-such-program")}, "probe": PROBE}
    with anyio.fail_after(15):
        async with serving(workspace, tmp_path, servers) as rt, client_for(rt, "legacy") as client:
            assert "echo: ok" in text_of(await client.call_tool("probe__echo", {"text": "ok"}))
            message = error_text(await client.call_tool("broken__anything", {}))
    assert message.startswith("upstream 'broken' failed to start (see the server log); try again in ")
    assert str(tmp_path) not in message


async def test_an_upstream_cannot_write_outside_its_confinement(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    async with serving(workspace, tmp_path, {"probe": PROBE}) as rt:
        if rt.confinement.mode != "landlock":
            pytest.skip("this kernel cannot confine spawned programs")
        async with client_for(rt, "legacy", elicitation_callback=answering("accept", YES)) as client:
            refused = await client.call_tool("probe__write_file", {"path": str(outside), "text": "x"})
            inside = await client.call_tool("probe__write_file", {"path": str(workspace / "in.txt"), "text": "x"})
            home = json.loads(text_of(await client.call_tool("probe__env", {"name": "HOME"})))["result"]
            into_home = await client.call_tool("probe__write_file", {"path": f"{home}/cache", "text": "x"})
            data_dir = await client.call_tool("probe__write_file", {"path": str(tmp_path / "data" / "x"), "text": "x"})
    assert "upstream 'probe' reported an error from write_file" in error_text(refused)
    assert not outside.exists() and not (tmp_path / "data" / "x").exists()
    assert data_dir.is_error
    assert not inside.is_error and not into_home.is_error  # the workspace as its mount says, and its own HOME


async def test_the_environment_is_minimal_and_vault_references_resolve(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MANAGED_TOOLS_TOKEN", "our-own-secret-token-value")
    asked: list[str] = []

    async def vault(name: str) -> str | None:
        asked.append(name)
        return "s3cret-value" if name == "API_KEY" else None

    probe = {**PROBE, "env": {"KEY": "${vault:API_KEY}", "PLAIN": "p"}}
    async with serving(workspace, tmp_path, {"probe": probe}, secrets=vault) as rt, client_for(rt, "legacy") as c:
        # Resolved and given to the upstream; what comes back is never shown (test_an_upstream_secret_appears_nowhere).
        assert "[secret redacted]" in text_of(await c.call_tool("probe__env", {"name": "KEY"}))
        assert "(unset)" in text_of(await c.call_tool("probe__env", {"name": "MANAGED_TOOLS_TOKEN"}))
        assert '"p"' in text_of(await c.call_tool("probe__env", {"name": "PLAIN"}))
        home = json.loads(text_of(await c.call_tool("probe__env", {"name": "HOME"})))["result"]
    assert asked == ["API_KEY"]
    assert Path(home).name == "probe" and not Path(home).is_relative_to(Path.home())


async def test_vault_references_read_the_agents_encrypted_vault(workspace: Path, tmp_path: Path) -> None:
    async with serving(workspace, tmp_path, {}) as rt:
        assert rt.variables.vault is not None
        async with rt.db.write() as tx:
            await vault.set_secret(tx, rt.variables.vault, "default", "API_KEY", SecretStr("from-the-vault"))
    probe = {**PROBE, "env": {"KEY": "${vault:API_KEY}"}}
    async with serving(workspace, tmp_path, {"probe": probe}) as rt, client_for(rt, "legacy") as client:
        assert "[secret redacted]" in text_of(await client.call_tool("probe__env", {"name": "KEY"}))
        assert "(unset)" in text_of(await client.call_tool("probe__env", {"name": "OTHER"}))


async def test_a_missing_secret_keeps_the_upstream_down_and_says_how_to_set_it(
    workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    probe = {**PROBE, "env": {"KEY": "${vault:MISSING_KEY}"}}
    async with serving(workspace, tmp_path, {"probe": probe}) as rt, client_for(rt, "legacy") as client:
        message = error_text(await client.call_tool("probe__echo", {"text": "x"}))
    assert "needs the secret MISSING_KEY" in message and "`managed-tools secret set MISSING_KEY`" in message


async def test_a_secret_never_reaches_the_log(
    workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def vault(name: str) -> str | None:
        return "leaky-secret-value"

    # The program prints its environment and exits: its stderr is logged, scrubbed.
    leak = {"command": "/bin/sh", "args": ["-c", "echo KEY=$KEY >&2; exit 1"], "env": {"KEY": "${vault:K}"}}
    async with serving(workspace, tmp_path, {"leak": leak}, secrets=vault):
        pass
    assert "KEY=[secret redacted]" in caplog.text and "leaky-secret-value" not in caplog.text


UPSTREAM_SECRET = "upstream-secret-8f2a61c0"


async def test_an_upstream_secret_appears_nowhere(
    workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23 N4: a `${vault:NAME}` given to an upstream, echoed back in a result and in an error: not in what the
    client sees, the events, both searches, the log at DEBUG, nor the database's bytes."""
    caplog.set_level("DEBUG")
    async with serving(workspace, tmp_path, {}) as rt:
        assert rt.variables.vault is not None
        async with rt.db.write() as tx:
            await vault.set_secret(tx, rt.variables.vault, "default", "UP_KEY", SecretStr(UPSTREAM_SECRET))
    probe = {**PROBE, "env": {"KEY": "${vault:UP_KEY}"}}
    shown: list[Any] = []
    async with serving(workspace, tmp_path, {"probe": probe}) as rt, client_for(rt, "legacy") as client:
        echoed = await client.call_tool("probe__env", {"name": "KEY"})
        refused = await client.call_tool("probe__env_refused", {"name": "KEY"})
        shown += [echoed, refused]
        for tool, arguments in (
            ("session_get_events", {"limit": 100}),
            ("session_search_context", {"query": "8f2a61c0", "includeCurrent": True}),
            ("session_search_context", {"query": "probe__env", "includeCurrent": True}),
            ("retrieval_search", {"query": "8f2a61c0", "includeCurrent": True}),
            ("retrieval_search", {"query": "refused", "includeCurrent": True}),
        ):
            shown.append(data(await client.call_tool(tool, arguments)))
        async with rt.db.read() as tx:
            shown.append([dict(row) for row in await tx.fetchall("SELECT * FROM events")])
    assert "[secret redacted]" in text_of(echoed)  # the upstream had the value, and it came back
    assert "refused with [secret redacted]" in error_text(refused)
    completed = [e for e in shown[2]["events"] if e["type"] == "span.completed"]
    assert any("[secret redacted]" in json.dumps(e) for e in completed)  # recorded, redacted
    assert shown[3]["count"] == 0 and shown[5]["count"] == 0  # the secret's own word finds nothing
    assert shown[4]["count"] >= 1 and shown[6]["count"] >= 1  # what surrounds it is still found
    everything = json.dumps([s.model_dump(mode="json") if hasattr(s, "model_dump") else s for s in shown], default=str)
    assert UPSTREAM_SECRET not in everything
    assert "refusing with [secret redacted]" in caplog.text  # the upstream's stderr
    assert UPSTREAM_SECRET not in caplog.text
    state = b"".join(p.read_bytes() for p in (tmp_path / "data").glob("state.db*"))
    assert state and UPSTREAM_SECRET.encode() not in state


@pytest.fixture
def http_upstream() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(300):  # until it answers HTTP (a GET without a session is refused: it is up)
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                if process.poll() is not None:
                    raise AssertionError("the HTTP upstream exited") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(5)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_streamable_http_upstream(workspace: Path, tmp_path: Path, http_upstream: str, mode: str) -> None:
    servers = {"remote": {"url": http_upstream, "headers": {"X-Probe": "1"}}}
    no = answering("decline")
    async with serving(workspace, tmp_path, servers) as rt, client_for(rt, mode, elicitation_callback=no) as client:
        assert "echo: far" in text_of(await client.call_tool("remote__echo", {"text": "far"}))
        denied = await client.call_tool("remote__write_file", {"path": str(tmp_path / "x"), "text": "x"})
    assert "denied" in error_text(denied)


async def test_stopping_kills_the_upstream(workspace: Path, tmp_path: Path) -> None:
    marked = {**PROBE, "args": [str(SERVER), "stdio", "--marker-4242.5"]}  # how to find it from out here
    async with serving(workspace, tmp_path, {"probe": marked}) as rt, client_for(rt, "legacy") as client:
        assert not (await client.call_tool("probe__pid", {})).is_error
        assert alive("--marker-4242.5")
    assert await gone("--marker-4242.5")


@pytest.mark.parametrize(
    ("servers", "says"),
    [
        ({"two__parts": PROBE}, "mcpServers.two__parts"),
        ({"x" * 25: PROBE}, "at most 24 characters"),
        ({"neither": {"args": []}}, "needs a `command` or a `url`"),
        ({"web": {"url": "ftp://host/mcp"}}, "mcpServers.web.http.url"),
        ({"env": {"command": "x", "env": {"BAD NAME": "1"}}}, "mcpServers.env.stdio.env"),
        ({"hdr": {"url": "http://h/mcp", "headers": {"X": "a\r\nb"}}}, "mcpServers.hdr.http.headers.X"),
    ],
)
def test_a_bad_entry_is_a_clear_start_up_error(
    workspace: Path, tmp_path: Path, servers: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        configured(workspace, tmp_path / "data", servers)
    assert says in str(caught.value)


def test_the_tools_command_shows_upstream_tools(workspace: Path, tmp_path: Path) -> None:
    configured(workspace, tmp_path / "data", {"probe": PROBE})
    listing = subprocess.run(
        [sys.executable, "-m", "managed_tools.server", "tools", "--workspace", str(workspace), "--data-dir",
         str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    rows = {line.split()[0]: line.split()[1] for line in listing.stdout.splitlines()[2:] if line.strip()}
    assert rows["probe__echo"] == "always_allow" and rows["probe__write_file"] == "always_ask"


def _listed_tool(name: str, description: str = "An upstream tool.") -> types.Tool:
    return types.Tool(name=name, description=description, input_schema={"type": "object"})


async def _never(tool: str, arguments: dict[str, Any], seconds: float) -> types.CallToolResult:
    raise AssertionError("not called")


def test_a_group_change_is_whole_or_not_at_all() -> None:
    """An upstream whose tools collide with another's leaves the registry as it was (regression: the old tools
    were dropped before the collision was found)."""
    registry = Registry()
    registry.replace_group("a", definitions("a", [_listed_tool("x")], _never, {}))
    registry.replace_group("b", definitions("b", [_listed_tool("y")], _never, {}))
    version = registry.version
    clash = definitions("b", [_listed_tool("z"), _listed_tool("z")], _never, {})
    with pytest.raises(RegistryError, match="registered twice"):
        registry.replace_group("b", clash)
    assert registry.names() == ["a__x", "b__y"] and registry.version == version
    registry.replace_group("b", definitions("b", [_listed_tool("y")], _never, {}))
    assert registry.version == version  # the same list: no change to tell anyone about
    registry.replace_group("b", [], absent=lambda: "upstream 'b' is down.")
    assert registry.names() == ["a__x"] and registry.version == version + 1
    assert registry.absent_reason("b__y") == "upstream 'b' is down." and registry.absent_reason("c__y") is None


def test_upstream_tools_keep_long_descriptions_and_skip_names_no_client_accepts() -> None:
    listed = [_listed_tool("read", "Reads a file. " * 200), _listed_tool("bad.name"), _listed_tool("n" * 61)]
    published = definitions("up", listed, _never, {})
    assert [d.name for d in published] == ["up__read"]
    assert len(published[0].description) == 2000 and published[0].description.endswith("…")
    assert published[0].permission_policy == "always_ask"  # no annotations: it asks


@pytest.mark.parametrize(
    ("selection", "served"),
    [
        ({"toolsets": ["files"], "tools": ["probe__echo"]}, {"probe__echo"}),
        ({"readOnly": True, "excludeTools": ["probe__env", "probe__env_refused"]},
         {"probe__echo", "probe__pid", "probe__image", "probe__fetch"}),
        ({"toolsets": ["mcp"], "excludeTools": ["probe__crash", "probe__grow"]},
         {"probe__echo", "probe__env", "probe__env_refused", "probe__pid", "probe__image", "probe__write_file",
          "probe__fetch"}),
    ],
)  # fmt: skip
async def test_toolset_flags_apply_to_upstream_tools(
    workspace: Path, tmp_path: Path, selection: dict[str, Any], served: set[str]
) -> None:
    """An upstream's tools arrive after start-up, in toolset `mcp`: the same selection narrows them, and a hidden
    one cannot be called."""
    async with serving(workspace, tmp_path, {"probe": PROBE}, **selection) as rt, client_for(rt, "legacy") as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        hidden = error_text(await client.call_tool("probe__crash", {}))
    assert {name for name in listed if name.startswith("probe__")} == served
    assert hidden.startswith("Unknown tool 'probe__crash'")
    assert ("read" in listed) == (selection.get("toolsets") != ["mcp"])


# ---- F7 (issue 25): start-up waits on no slow upstream; remembered tools; a garbage writer cannot flood the log ----

HANGS = {**PROBE, "env": {"PROBE_MODE": "hang", "PROBE_TOKEN": "rotated-value"}}
SERVES = {**PROBE, "env": {"PROBE_MODE": "serve", "PROBE_TOKEN": "value-never-kept-4711"}}
FIRST_LIST_SECONDS = 3.5  # start-up (database, confinement) plus the 2 s it may wait for upstreams


async def _first_list(data_dir: Path, workspace: Path, servers: dict[str, Any]) -> tuple[float, set[str], str]:
    """How long the first tools/list took from the start, what it held, and what a call to `<first>__echo`
    answered (with how long that took)."""
    began = time.monotonic()
    async with open_runtime(configured(workspace, data_dir, servers)) as rt, client_for(rt, "legacy") as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        took = time.monotonic() - began
        with anyio.fail_after(1):  # at once, not after the upstream's handshake timeout
            answer = error_text(await client.call_tool(f"{next(iter(servers))}__echo", {"text": "x"}))
    return took, listed, answer


async def test_an_upstream_that_hangs_at_initialize_does_not_hold_start_up(workspace: Path, tmp_path: Path) -> None:
    took, listed, answer = await _first_list(tmp_path / "data", workspace, {"stuck": HANGS})
    assert took < FIRST_LIST_SECONDS  # it was 20 s: start-up waited for every upstream's first start
    assert "read" in listed and not [name for name in listed if name.startswith("stuck__")]  # nothing remembered
    assert answer.startswith("upstream 'stuck' is starting (") and answer.endswith(" s so far); try again shortly.")


@pytest.mark.slow
async def test_remembered_tools_are_listed_at_once_and_answer_starting(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with open_runtime(configured(workspace, data_dir, {"probe": SERVES})) as rt:
        await upstreams_started(rt, "probe")
    kept = data_dir / "upstreams" / "probe.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    text = kept.read_text()
    assert "probe_echo" not in text and '"echo"' in text and "value-never-kept" not in text  # names, not values
    # The same upstream (env values changed, names the same), now hanging at initialize: its tools are there.
    took, listed, answer = await _first_list(data_dir, workspace, {"probe": HANGS})
    assert took < FIRST_LIST_SECONDS
    assert {"probe__echo", "probe__write_file", "probe__crash"} <= listed
    assert answer.startswith("upstream 'probe' is starting (") and answer.endswith(" s so far); try again shortly.")
    # Another command is another upstream: nothing of the first is listed for it.
    other = {**HANGS, "args": [str(SERVER), "stdio", "--other"]}
    _, listed, _ = await _first_list(data_dir, workspace, {"probe": other})
    assert not [name for name in listed if name.startswith("probe__")]


@pytest.mark.parametrize("mode", ERAS)
async def test_no_person_is_asked_for_a_tool_whose_upstream_is_starting(
    workspace: Path, tmp_path: Path, mode: str
) -> None:
    """Issue 38 item 5: a remembered always_ask tool of an upstream still starting answers "starting" before any
    approval is asked; the approval is not spent on an answer that it is starting."""
    data_dir = tmp_path / "data"
    async with open_runtime(configured(workspace, data_dir, {"probe": SERVES})) as rt:
        await upstreams_started(rt, "probe")
    seen: list[str] = []
    config = configured(workspace, data_dir, {"probe": HANGS})
    async with (
        open_runtime(config) as rt,
        client_for(rt, mode, elicitation_callback=answering("accept", YES, seen)) as client,
    ):
        with anyio.fail_after(2):
            result = await client.call_tool("probe__write_file", {"path": str(workspace / "x.txt"), "text": "x"})
        async with rt.db.read() as tx:
            requests = await tx.scalar("SELECT count(*) FROM approvals")
    assert result.is_error and error_text(result).startswith("upstream 'probe' is starting (")
    assert seen == [] and requests == 0  # nobody was asked, and no request waits for anyone


@pytest.mark.slow
async def test_its_own_list_replaces_the_remembered_one(workspace: Path, tmp_path: Path) -> None:
    """A remembered tool the upstream no longer lists goes when it lists its own, and clients are told."""
    data_dir = tmp_path / "data"
    async with open_runtime(configured(workspace, data_dir, {"probe": SERVES})) as rt:
        await upstreams_started(rt, "probe")
        async with client_for(rt, "legacy", elicitation_callback=answering("accept", YES)) as client:
            text_of(await client.call_tool("probe__grow", {}))  # lists `extra` from now on; remembered
            with anyio.fail_after(10):
                while "probe__extra" not in rt.registry.names():  # noqa: ASYNC110 (the re-list is the upstream's)
                    await anyio.sleep(0.05)
    changed = anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    config = configured(workspace, data_dir, {"probe": SERVES})
    async with open_runtime(config) as rt, client_for(rt, "legacy", message_handler=on_message) as client:
        assert "probe__extra" in {tool.name for tool in (await client.list_tools()).tools}
        with anyio.fail_after(30):
            await changed.wait()
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert "probe__extra" not in listed and "probe__echo" in listed
        assert "echo: ok" in text_of(await client.call_tool("probe__echo", {"text": "ok"}))


@pytest.mark.slow
async def test_a_garbage_writing_upstream_logs_a_bounded_number_of_lines(
    workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="managed_tools.upstream")
    noisy = {**PROBE, "env": {"PROBE_MODE": "garbage"}}
    async with open_runtime(configured(workspace, tmp_path / "data", {"noisy": noisy})):
        await anyio.sleep(3)
    said = [r.getMessage() for r in caplog.records if r.name == "managed_tools.upstream"]
    garbage = [line for line in said if "noisy wrote a line that is not JSON-RPC" in line]
    stderr = [line for line in said if "garbage on stderr" in line]
    # Thousands were written; at most a burst and what refills in 3 s of each shape reach the log.
    assert 1 <= len(garbage) <= 12 and len(stderr) <= 12, said[:20]
    assert len(said) <= 40


@pytest.mark.parametrize(
    "content",
    ["not json", "{}", json.dumps({"spec": spec_hash(StdioUpstream.model_validate(HANGS)),
                                   "tools": [{"name": "echo", "inputSchema": {"type": "object"}}] * 2})],
    ids=["garbage", "shape", "twice"],
)  # fmt: skip
async def test_a_damaged_memory_is_ignored_with_one_line(
    workspace: Path, tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    kept = tmp_path / "data" / "upstreams" / "probe.json"
    kept.parent.mkdir(parents=True)
    kept.write_text(content)
    took, listed, answer = await _first_list(tmp_path / "data", workspace, {"probe": HANGS})
    assert took < FIRST_LIST_SECONDS and not [name for name in listed if name.startswith("probe__")]
    assert answer.startswith("upstream 'probe' is starting (")
    said = [r.getMessage() for r in caplog.records if r.name == "managed_tools.upstream"]
    assert [line for line in said if "not used" in line or "not published" in line], said


def test_repeated_lines_are_dropped_and_counted() -> None:
    now = [0.0]
    limit = RepeatFilter(burst=2, interval=10.0, max_shapes=2, clock=lambda: now[0])

    def passes(msg: str, *args: object) -> str | None:
        record = logging.LogRecord("managed_tools.upstream", logging.WARNING, __file__, 1, msg, args, None)
        return record.getMessage() if limit.filter(record) else None

    assert [passes("upstream %s wrote %s", "a", n) for n in range(4)] == ["upstream a wrote 0", "upstream a wrote 1",
                                                                          None, None]  # fmt: skip
    assert passes("upstream %s wrote %s", "b", 9) == "upstream b wrote 9"  # another upstream: its own bucket
    now[0] = 5.0  # one line's worth refilled
    assert passes("upstream %s wrote %s", "a", 5) == "upstream a wrote 5 (... repeated 2 more times)"
    assert passes("upstream %s wrote %s", "a", 6) is None
    passes("upstream %s said %s", "c", 1)  # a third shape: the least recently seen ("b") is forgotten
    assert len(limit._buckets) == 2 and ("managed_tools.upstream", "upstream %s wrote %s", "b") not in limit._buckets
