"""The `managed-tools` command. stdout carries the protocol when serving, so every log goes to stderr."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from managed_tools.server import __version__, human
from managed_tools.server.app import build_server
from managed_tools.server.config import ConfigError, HttpConfig, ServeConfig
from managed_tools.server.data_dir import state_root
from managed_tools.server.http import announce, bind, build_app, http_server
from managed_tools.server.publish import to_mcp_tool
from managed_tools.server.rules import (
    APPROVAL_WAIT_RULE,
    MAX_APPROVAL_WAIT_SECONDS,
    NAME,
    NAME_RULE,
    TOKEN_ENV,
    approval_wait_allowed,
)
from managed_tools.server.runtime import StartupError, open_runtime, startup_extensions
from managed_tools.tools.catalogue import build_registry
from managed_tools.tools.context import Runtime

log = logging.getLogger("managed_tools")


def _agent(value: str) -> str:
    if not NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"takes {NAME_RULE}; not {value!r}")
    return value


def _approval_wait(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not approval_wait_allowed(seconds):
        raise argparse.ArgumentTypeError(f"takes {APPROVAL_WAIT_RULE}; not {value!r}")
    return seconds


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="managed-tools",
        description="An MCP server that publishes a managed tool catalogue and runs its tools safely.",
        epilog="Run 'managed-tools serve' from an MCP client configuration (see mcp.json).",
    )
    parser.add_argument("--version", action="version", version=f"managed-tools {__version__}")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--workspace", type=Path, help="the project directory mounted at /workspace (default: .)")
    where.add_argument(
        "--data-dir", type=Path, help="where state lives, outside the workspace and every vault (default: below)"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser(
        "serve", parents=[where], help="serve the catalogue over stdio (one local client) or HTTP (remote clients)"
    )
    serve.add_argument(
        "--agent", type=_agent, default="default", help="the agent identity sessions belong to (default: default)"
    )
    serve.add_argument("--session", metavar="ID", help="resume this session instead of starting a new one")
    serve.add_argument("--allow", metavar="TOOL", action="append", default=[], help="pre-approve TOOL (repeatable)")
    serve.add_argument("--ask", metavar="TOOL", action="append", default=[], help="always ask before TOOL runs")
    serve.add_argument(
        "--approval-wait",
        metavar="SECONDS",
        type=_approval_wait,
        help=f"how long a person has to answer, up to {MAX_APPROVAL_WAIT_SECONDS:g} (default: 120)",
    )
    serve.add_argument(
        "--vault", metavar="NAME=DIR", action="append", default=[], help="mount DIR read-only at /vaults/NAME"
    )
    serve.add_argument(
        "--tools-module",
        metavar="MODULE",
        action="append",
        default=[],
        help="load your own tools, resources and prompts from MODULE, a module name or a .py file path "
        "(its TOOLS, RESOURCES, PROMPTS)",
    )
    serve.add_argument(
        "--log-level",
        type=str.upper,
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="how much to log on stderr, in any case (default: WARNING)",
    )
    confine = serve.add_argument_group("confinement of spawned programs (see README: Confinement)")
    confine.add_argument(
        "--require-confinement",
        action="store_true",
        help="refuse to start unless the kernel confines every spawned program (Landlock)",
    )
    confine.add_argument(
        "--shell-network",
        choices=["on", "off"],
        default="on",
        help="whether shell_run and the persistent shell may open TCP connections (default: on)",
    )
    serve.add_argument(
        "--transport",
        choices=["stdio", "http", "sse"],
        default="stdio",
        help="stdio (default); http: Streamable HTTP at /mcp plus legacy SSE at /sse; sse: legacy SSE only",
    )
    remote = serve.add_argument_group("remote clients (--transport http or sse)")
    remote.add_argument("--host", help="the address to listen on (default: 127.0.0.1; any other needs a token)")
    remote.add_argument("--port", type=int, help="the port (default: 8765; 0 picks a free one, printed on stderr)")
    remote.add_argument(
        "--stateless", action="store_true", default=None, help="no MCP sessions: no pushed questions (see README)"
    )
    remote.add_argument("--token-file", type=Path, help=f"a file holding the bearer token (default: ${TOKEN_ENV})")
    remote.add_argument(
        "--allowed-host", dest="allowed_hosts", metavar="HOST", action="append", help="also accept this Host header"
    )
    remote.add_argument(
        "--allowed-origin", dest="allowed_origins", metavar="ORIGIN", action="append", help="also accept this Origin"
    )
    remote.add_argument("--max-request-bytes", type=int, metavar="N", help="largest request body (default: 4 MiB)")
    remote.add_argument("--max-sessions", type=int, metavar="N", help="open MCP sessions and SSE streams (1000)")
    remote.add_argument(
        "--session-idle-timeout",
        dest="session_idle_seconds",
        type=float,
        metavar="SECONDS",
        help="close idle MCP sessions (default: 1800)",
    )
    remote.add_argument(
        "--header-timeout",
        dest="header_timeout_seconds",
        type=float,
        metavar="SECONDS",
        help="close a connection whose request headers take longer (default: 10)",
    )
    remote.add_argument(
        "--body-timeout",
        dest="body_timeout_seconds",
        type=float,
        metavar="SECONDS",
        help="close a connection whose request body takes longer (default: 30)",
    )
    remote.add_argument(
        "--max-connections", type=int, metavar="N", help="open connections; more get 503 at once (default: 512)"
    )

    tools = commands.add_parser("tools", help="print the tool catalogue")
    tools.add_argument("--json", action="store_true", help="one JSON document for machines")

    pending = commands.add_parser("pending", parents=[where], help="list permission requests waiting for a person")
    pending.add_argument("--json", action="store_true", help="one JSON document for machines")
    for name, verb in (("approve", "approve"), ("deny", "refuse")):
        sub = commands.add_parser(name, parents=[where], help=f"{verb} a waiting permission request")
        sub.add_argument("request_id", metavar="ID")
        sub.add_argument("--note", help="a note recorded with the decision (the model sees it on a denial)")
    respond = commands.add_parser("respond", parents=[where], help="answer a custom tool's request with its result")
    respond.add_argument("request_id", metavar="ID")
    respond.add_argument("--json", dest="answer", required=True, metavar="OBJECT", help="the result, a JSON object")
    stop = commands.add_parser("interrupt", parents=[where], help="clear a session's open requests; it goes idle")
    stop.add_argument("--session", metavar="ID", help="the session (default: the one session with open requests)")
    stop.add_argument("--note", help="a note recorded with the interrupt")
    # The default data dir as a path a person can copy: an epilog kept raw (help text is wrapped at hyphens).
    for name in ("serve", "pending", "approve", "deny", "respond", "interrupt"):
        commands.choices[name].epilog = (
            f"State lives by default in {state_root() / '<workspace name>-<hash of its path>'}\n"
            "(one directory per workspace, outside every mount); --data-dir DIR chooses another."
        )
        commands.choices[name].formatter_class = argparse.RawDescriptionHelpFormatter
    return parser, commands.choices


def main(argv: list[str] | None = None) -> int:
    parser, subcommands = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command they were given to, with its usage (argparse would show the top level's)
        command = parser if args.command is None else subcommands[args.command]
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "tools":
        return _print_tools(as_json=args.json)
    try:
        config = ServeConfig.build(
            workspace=args.workspace,
            data_dir=args.data_dir,
            agent=getattr(args, "agent", "default"),
            session=getattr(args, "session", None) if args.command == "serve" else None,
            allow=tuple(getattr(args, "allow", ())),
            ask=tuple(getattr(args, "ask", ())),
            approval_wait_seconds=getattr(args, "approval_wait", None),
            tool_modules=tuple(getattr(args, "tools_module", ())),
            vaults=_vaults(getattr(args, "vault", [])),
        )
    except ValidationError as exc:
        print(f"managed-tools: invalid configuration: {exc.errors(include_url=False)[0]['msg']}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"managed-tools: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        try:
            http = _http_config(args)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field = str(error["loc"][0])
            print(f"managed-tools: {REMOTE_FLAGS.get(field, field)}: {error['msg']}", file=sys.stderr)
            return 2
        except ConfigError as exc:
            print(f"managed-tools: {exc}", file=sys.stderr)
            return 2
        confinement = {"require_confinement": args.require_confinement, "shell_network": args.shell_network == "on"}
        return _serve(config.model_copy(update=confinement), http, args.log_level)
    return _human(args, config)


def _vaults(specs: list[str]) -> dict[str, Path]:
    vaults: dict[str, Path] = {}
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if not sep or not name or not directory:
            raise ConfigError(f"--vault takes NAME=DIR, not {spec!r}.")
        vaults[name] = Path(directory)
    return vaults


REMOTE_FLAGS = {  # HttpConfig field: the flag that sets it
    "host": "--host",
    "port": "--port",
    "stateless": "--stateless",
    "token_file": "--token-file",
    "allowed_hosts": "--allowed-host",
    "allowed_origins": "--allowed-origin",
    "max_request_bytes": "--max-request-bytes",
    "max_sessions": "--max-sessions",
    "session_idle_seconds": "--session-idle-timeout",
    "header_timeout_seconds": "--header-timeout",
    "body_timeout_seconds": "--body-timeout",
    "max_connections": "--max-connections",
}


def _http_config(args: argparse.Namespace) -> HttpConfig | None:
    given = {field: getattr(args, field) for field in REMOTE_FLAGS if getattr(args, field) is not None}
    if args.transport == "stdio":
        if given:
            raise ConfigError(f"{REMOTE_FLAGS[next(iter(given))]} applies to --transport http or sse.")
        return None
    for field in ("allowed_hosts", "allowed_origins"):
        if field in given:
            given[field] = tuple(given[field])
    return HttpConfig.build(transport=args.transport, **given)


def _human(args: argparse.Namespace, config: ServeConfig) -> int:
    commands: dict[str, Callable[[], Awaitable[None]]] = {
        "pending": lambda: human.pending(config, as_json=args.json),
        "approve": lambda: human.decide(config, args.request_id, approve=True, note=args.note),
        "deny": lambda: human.decide(config, args.request_id, approve=False, note=args.note),
        "respond": lambda: human.respond(config, args.request_id, args.answer),
        "interrupt": lambda: human.interrupt(config, args.session, note=args.note),
    }
    try:
        anyio.run(commands[args.command])
    except human.HumanError as exc:
        return human.fail(str(exc))
    return 0


def _serve(config: ServeConfig, http: HttpConfig | None, log_level: str) -> int:
    logging.basicConfig(stream=sys.stderr, level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if http is None:
            anyio.run(_serve_stdio, config)
        else:
            anyio.run(_serve_remote, config, http, log_level)
    except StartupError as exc:
        print(f"managed-tools: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


async def _serve_stdio(config: ServeConfig) -> None:
    extensions = startup_extensions(config)
    async with open_runtime(config, extensions) as runtime:
        _announce_confinement(runtime)
        server = build_server(
            runtime,
            transport="stdio",
            session_id=config.session,
            approval_wait_seconds=config.approval_wait_seconds,
            extensions=extensions,
        )
        log.info("serving agent %s over stdio; data dir %s", config.agent, config.data_dir)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


async def _serve_remote(config: ServeConfig, http: HttpConfig, log_level: str) -> None:
    extensions = startup_extensions(config)
    async with open_runtime(config, extensions) as runtime:
        app = build_app(runtime, config, http, extensions)
        try:
            sock = bind(http)
        except OSError as exc:
            raise StartupError(f"Cannot listen on {http.host} port {http.port}: {exc.strerror or exc}.") from None
        with sock:
            announce(http, sock)  # first on stderr: scripts read the address from its first line
            _announce_confinement(runtime)
            log.info("serving agent %s over %s; data dir %s", config.agent, http.transport, config.data_dir)
            await http_server(app, http, log_level).serve(sockets=[sock])


def _announce_confinement(runtime: Runtime) -> None:
    """What the kernel does not enforce is said on stderr at start-up, whatever the log level."""
    for notice in runtime.confinement.notices:
        print(f"managed-tools: {notice}", file=sys.stderr)
    c = runtime.confinement
    how = f", spawn {c.spawn}" + (f": {c.spawn_reason}" if c.spawn_reason else "") if c.spawn else ""
    log.info("confinement: %s (Landlock ABI %d%s)", c.mode, c.abi, how)


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
