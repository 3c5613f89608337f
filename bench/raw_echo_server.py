"""The floor for bench/stdio_compare.py: an `echo` tool answered with plain JSON-RPC lines, no MCP library.

It reads a line, answers it with `json`, and writes the answer: what a pipe and one JSON parse and dump cost, with
no validation, dispatch or middleware. It knows just enough of the protocol for `mcp.Client` to talk to it in the
handshake era (`initialize`, `tools/list`, `tools/call`); any other request is METHOD_NOT_FOUND.

Run: python bench/raw_echo_server.py   (speaks MCP on stdin/stdout)
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOL = {
    "name": "echo",
    "description": "Return the text it was given.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "outputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


def answer(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw-echo", "version": "0.0.1"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        text = str(params.get("arguments", {}).get("text", ""))
        return {"content": [{"type": "text", "text": text}], "structuredContent": {"text": text}}
    if method == "ping":
        return {}
    return None


def main() -> None:
    out = sys.stdout
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:  # a notification: nothing to answer
            continue
        result = answer(message.get("method", ""), message.get("params") or {})
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if result is None:
            reply["error"] = {"code": -32601, "message": "Method not found"}
        else:
            reply["result"] = result
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
