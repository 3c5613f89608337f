"""A small upstream MCP server for tests/server/upstream/test_upstream.py, run as a real subprocess behind our gate.

`python upstream_server.py stdio` or `python upstream_server.py http PORT`. Tools: a read-only echo and env
reader (and one that fails quoting a variable), a writing tool, an image, one that adds a tool and says the list
changed, an HTTP fetch, and one that crashes.

`PROBE_MODE` in its environment makes it misbehave instead of serving: `hang` never answers (not even
initialize), `garbage` writes lines that are not JSON-RPC to stdout and stderr as fast as it can.
"""

from __future__ import annotations

import base64
import os
import sys
import time
import urllib.request
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
# A 1x1 transparent PNG.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()

mcp = MCPServer("upstream-probe", version="0.1.0")


@mcp.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@mcp.tool(annotations=READ_ONLY)
def env(name: str) -> str:
    """The value of one environment variable of this process, or (unset)."""
    return os.environ.get(name, "(unset)")


@mcp.tool(annotations=READ_ONLY)
def env_refused(name: str) -> str:
    """Fail, quoting one environment variable's value in the error (and on stderr)."""
    value = os.environ.get(name, "(unset)")
    print(f"refusing with {value}", file=sys.stderr, flush=True)
    raise ToolError(f"refused with {value}")


@mcp.tool(annotations=READ_ONLY)
def pid() -> int:
    """This process's id."""
    return os.getpid()


@mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def write_file(path: str, text: str) -> str:
    """Write text to a file by absolute path."""
    Path(path).write_text(text, encoding="utf-8")
    return f"wrote {len(text)} characters"


@mcp.tool(annotations=READ_ONLY)
def image() -> ImageContent:
    """A one-pixel PNG."""
    return ImageContent(type="image", data=PIXEL, mime_type="image/png")


@mcp.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `extra` and tell the client the list changed."""

    def extra() -> str:
        """A tool added while serving."""
        return "extra"

    mcp.add_tool(extra, annotations=READ_ONLY)
    await ctx.session.send_tool_list_changed()
    return "grown"


@mcp.tool(annotations=READ_ONLY)
def fetch(url: str) -> str:
    """GET `url` (through HTTP_PROXY where one is set) and return the body."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


@mcp.tool()
def crash() -> str:
    """Exit the process at once."""
    os._exit(3)


def misbehave(mode: str) -> None:
    if mode == "hang":
        time.sleep(3600)
    while mode == "garbage":
        print(f"not json-rpc {time.monotonic()}", flush=True)
        print(f"garbage on stderr {time.monotonic()}", file=sys.stderr, flush=True)
        time.sleep(0.0005)


if __name__ == "__main__":
    misbehave(os.environ.get("PROBE_MODE", "serve"))
    if sys.argv[1:2] == ["http"]:
        mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run()
