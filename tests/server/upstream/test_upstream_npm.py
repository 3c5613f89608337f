"""The reference filesystem server from the npm registry (@modelcontextprotocol/server-filesystem) behind our
gate: its reads run, its writes wait for a person. CI installs it once (.ci/run) and names the npm prefix in
$MANAGED_TOOLS_NPM_PREFIX; without it (no npm, no network) this test is skipped."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import error_text
from test_upstream import YES, answering, client_for, serving, text_of

pytestmark = pytest.mark.anyio

PREFIX = os.environ.get("MANAGED_TOOLS_NPM_PREFIX", "")
PACKAGE = Path(PREFIX) / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
needs_package = pytest.mark.skipif(
    not PREFIX or not PACKAGE.is_file() or shutil.which("node") is None,
    reason="the npm filesystem server is not installed (.ci/run installs it into $MANAGED_TOOLS_NPM_PREFIX)",
)


@needs_package
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_reference_filesystem_server_reads_freely_and_writes_with_a_yes(
    workspace: Path, tmp_path: Path, mode: str
) -> None:
    (workspace / "hello.txt").write_text("hello from the workspace", encoding="utf-8")
    fs = {"command": "node", "args": [str(PACKAGE), str(workspace)], "readPaths": [PREFIX]}
    target = workspace / "new.txt"
    seen: list[str] = []
    async with serving(workspace, tmp_path, {"fs": fs}) as rt:
        async with client_for(rt, mode, elicitation_callback=answering("decline", seen=seen)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            policies = {
                n: (t.meta or {})["managed-tools/tool"].get("permissionPolicy", "always_allow")
                for n, t in tools.items()
            }
            read = await client.call_tool("fs__read_text_file", {"path": str(workspace / "hello.txt")})
            denied = await client.call_tool("fs__write_file", {"path": str(target), "content": "no"})
        assert policies["fs__read_text_file"] == "always_allow" and policies["fs__write_file"] == "always_ask"
        assert "hello from the workspace" in json.dumps(text_of(read))
        assert "denied" in error_text(denied) and not target.exists()
        assert len(seen) == 1 and "fs__write_file" in seen[0]  # the read asked nobody
        async with client_for(rt, mode, elicitation_callback=answering("accept", YES)) as client:
            text_of(await client.call_tool("fs__write_file", {"path": str(target), "content": "yes"}))
    assert target.read_text(encoding="utf-8") == "yes"
