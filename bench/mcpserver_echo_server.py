"""A baseline for bench/stdio_compare.py: the SDK's high-level `MCPServer` with one `echo` tool, over stdio.

This is the server a user of the SDK writes first (a decorated function, its schemas inferred from the
signature), so our per-call cost is measured against what choosing the SDK alone would give.

Run: python bench/mcpserver_echo_server.py   (speaks MCP on stdin/stdout)
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

server = MCPServer("mcpserver-echo")


class Echoed(BaseModel):
    text: str


@server.tool()
def echo(text: str) -> Echoed:
    """Return the text it was given."""
    return Echoed(text=text)


if __name__ == "__main__":
    server.run("stdio")
