"""A required secret asked end to end (issue 15): a real server runs a tool that declares a secret, the client
is asked in URL mode, a person types the value on the loopback page in headless Chromium, the call runs with it,
and the value lands in the agent's vault, encrypted: the next call asks nobody."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import data
from mcp import Client
from test_pages import SECRET, Person, browser_test, in_browser, pages

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.consent.board import Pages
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import vault
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio
__all__ = ["pages"]  # a fixture shared with test_pages


@pytest.fixture
async def rt(workspace: Path) -> AsyncIterator[Runtime]:
    config = ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=("support.probe_variables",))
    async with open_runtime(config) as runtime:
        yield runtime


@browser_test
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_required_secret_typed_on_the_page_runs_the_call_and_is_kept_encrypted(
    rt: Runtime, pages: Pages, browser: Any, mode: str
) -> None:
    person = Person()
    server = build_server(rt, transport="memory", approval_wait_seconds=30, pages=pages)
    shown: dict[str, str] = {}
    async with Client(server, mode=mode, elicitation_callback=person) as client:
        async with anyio.create_task_group() as tg:

            async def the_person() -> None:
                params = await person.urls.receive()
                assert "API_KEY" in params.message and params.url.startswith(pages.origin + "/p/")
                shown.update(await in_browser(browser, params.url, "#provide", fill=SECRET))

            tg.start_soon(the_person)
            first = data(await client.call_tool("probe_key", {}))
        again = data(await client.call_tool("probe_key", {}))  # from the vault now: nobody is asked
    digest = hashlib.sha256(SECRET.encode()).hexdigest()[:12]
    assert first == again == {"digest": digest, "length": len(SECRET), "leaked": None}
    assert shown["name"] == "API_KEY" and shown["description"] == "The Acme API key"
    with pytest.raises(anyio.WouldBlock):
        person.urls.receive_nowait()
    assert rt.variables.vault is not None
    async with rt.db.read() as tx:
        stored = await vault.get_secret(tx, rt.variables.vault, rt.environment.agent_id, "API_KEY")
    assert stored is not None and stored.get_secret_value() == SECRET
    files = b"".join(p.read_bytes() for p in rt.environment.data_dir.glob("state.db*"))
    assert SECRET.encode() not in files
