"""The `managed-tools` command. stdout carries the protocol when serving, so every log goes to stderr."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import anyio
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from server import __version__
from server.app import build_server
from server.config import ServeConfig
from server.publish import to_mcp_tool
from server.runtime import StartupError, open_runtime
from tools.catalogue import build_registry

log = logging.getLogger("managed_tools")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="managed-tools",
        description="An MCP server that publishes a managed tool catalogue and runs its tools safely.",
        epilog="Run 'managed-tools serve' from an MCP client configuration (see mcp.json).",
    )
    parser.add_argument("--version", action="version", version=f"managed-tools {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve the catalogue to one MCP client over stdio")
    serve.add_argument("--workspace", type=Path, help="the project directory mounted at /workspace (default: .)")
    serve.add_argument("--data-dir", type=Path, help="where state lives (default: <workspace>/.managed-tools)")
    serve.add_argument("--agent", default="default", help="the agent identity sessions belong to (default: default)")
    serve.add_argument("--session", metavar="ID", help="resume this session instead of starting a new one")
    serve.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    tools = commands.add_parser("tools", help="print the tool catalogue")
    tools.add_argument("--json", action="store_true", help="one JSON document for machines")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "tools":
        return _print_tools(as_json=args.json)
    parser.print_help(sys.stderr)
    return 2


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = ServeConfig.build(
            workspace=args.workspace, data_dir=args.data_dir, agent=args.agent, session=args.session
        )
    except ValidationError as exc:
        print(f"managed-tools: invalid configuration: {exc.errors(include_url=False)[0]['msg']}", file=sys.stderr)
        return 2
    try:
        anyio.run(_serve_stdio, config)
    except StartupError as exc:
        print(f"managed-tools: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


async def _serve_stdio(config: ServeConfig) -> None:
    async with open_runtime(config) as runtime:
        server = build_server(runtime, transport="stdio", session_id=config.session)
        log.info("serving agent %s from %s over stdio", config.agent, config.data_dir)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def _print_tools(*, as_json: bool) -> int:
    registry = build_registry()
    if as_json:
        listing = [to_mcp_tool(d).model_dump(mode="json", by_alias=True, exclude_none=True) for d in registry]
        print(json.dumps({"tools": listing}, indent=2))
        return 0
    rows = [
        (d.name, d.permission_policy, "read-only" if d.read_only else "writes", d.description.split(". ")[0])
        for d in registry
    ]
    width = max(len(name) for name, *_ in rows)
    print(f"{len(rows)} tools (always_ask tools wait for a person's approval)\n")
    for name, policy, mode, summary in rows:
        print(f"{name:<{width}}  {policy:<12}  {mode:<9}  {summary}")
    return 0
