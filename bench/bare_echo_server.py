"""The baseline for bench/stdio_roundtrip.py: a bare low-level MCP server with an `echo` tool over stdio.

It does what the SDK must do for any tool call and nothing more (no validation, no database, no audit
events), so the gap between it and managed-tools is our own per-call cost.

With `BENCH_REPLAY_FILE=<json>` set it also serves `replay`: it answers every call with the canned result and
output schema in that file (a real managed-tools result), so the comparison can hold the payload size equal.

Run: python bench/bare_echo_server.py          (speaks MCP on stdin/stdout)
     python bench/bare_echo_server.py --http   (Streamable HTTP on a free loopback port, printed on stderr)
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

ECHO = types.Tool(
    name="echo",
    title="Echo",
    description="Return the text it was given.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True),
)
REPLAY_FILE = os.environ.get("BENCH_REPLAY_FILE")
REPLAY: dict[str, Any] = json.loads(Path(REPLAY_FILE).read_text()) if REPLAY_FILE else {}
TOOLS = [ECHO]
if REPLAY:
    TOOLS.append(
        types.Tool(
            name="replay",
            description="Return a canned result.",
            input_schema={"type": "object"},
            output_schema=REPLAY["outputSchema"],
        )
    )
LISTING = types.ListToolsResult(tools=TOOLS)


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return LISTING


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "replay" and REPLAY:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=REPLAY["text"])],
            structured_content=REPLAY["structured"],
        )
    if params.name != "echo":
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    text = str((params.arguments or {}).get("text", ""))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"text": text},
    )


server: Server[Any] = Server("bare-echo", version="0.0.1", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def main_http() -> None:
    """The SDK's own Streamable HTTP app (stateful, its defaults) on uvicorn, with the uvicorn settings managed-tools
    serves with (server/http/transport.py `http_server`), so that the ratio compares the same HTTP server: the httptools
    parser (ours is its subclass with deadlines and a connection bound), no WebSocket support, no access log, the
    asyncio event loop of `anyio.run`, a loopback socket bound before serving, uvicorn's default backlog."""
    import uvicorn

    # IPPROTO_TCP, as the socket `uvicorn.run(host=..., port=...)` makes: asyncio turns Nagle's algorithm off only
    # for such sockets, and with it on every answer waits ~40 ms for the client's delayed acknowledgement.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    print(f"bare-echo: serving http://127.0.0.1:{sock.getsockname()[1]}/mcp", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        server.streamable_http_app(), http="httptools", ws="none", log_level="warning", access_log=False
    )
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    anyio.run(main_http if "--http" in sys.argv[1:] else main)
