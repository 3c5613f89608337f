"""The `managed-tools` command. stdout carries the protocol when serving, so every log goes to stderr."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from managed_tools.server import __version__
from managed_tools.server.data_dir import state_root
from managed_tools.server.rules import (
    APPROVAL_WAIT_RULE,
    MAX_APPROVAL_WAIT_SECONDS,
    NAME,
    NAME_RULE,
    TOKEN_ENV,
    approval_wait_allowed,
)

# Only the parser loads here, so that `--version`, `--help` and usage errors answer at once; the MCP SDK,
# pydantic and the stores load with server/commands.py, once a command is to run.


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


def _names(value: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in value.split(",") if name.strip())


def _selection_flags() -> argparse.ArgumentParser:
    """serve, tools and the approval commands: which tools are served (a hidden tool's request is never shown)."""
    select = argparse.ArgumentParser(add_help=False)
    chosen = select.add_argument_group("which tools are served (docs/toolsets.md; config.json has the same keys)")
    chosen.add_argument(
        "--toolsets", metavar="A,B", type=_names, action="append",
        help="serve only these toolsets: families of tools, custom, extensions, mcp; all (default)",
    )  # fmt: skip
    chosen.add_argument("--tools", metavar="A,B", type=_names, action="append", help="also serve these tools")
    chosen.add_argument(
        "--exclude-tools", metavar="A,B", type=_names, action="append", help="never serve these tools (wins)"
    )
    chosen.add_argument(
        "--read-only", action=argparse.BooleanOptionalAction, default=None,
        help="serve only tools that neither write nor run anything (wins over everything)",
    )  # fmt: skip
    return select


def _add_postgresql(
    where: argparse.ArgumentParser, commands: argparse._SubParsersAction[argparse.ArgumentParser]
) -> None:
    """--database for every command that opens the state, and `migrate`, which copies an SQLite state there."""
    where.add_argument(
        "--database",
        metavar="URL",
        help="keep the state in PostgreSQL at URL (postgresql://...; default: $MANAGED_TOOLS_DATABASE, else "
        "SQLite in the data dir); put the password in $PGPASSWORD or ~/.pgpass, not in the URL",
    )
    move = commands.add_parser("migrate", help="copy an SQLite state into PostgreSQL (then serve with --database)")
    move.add_argument("--from", dest="source", required=True, type=Path, metavar="PATH",
                      help="the SQLite state: a data dir, or its state.db")  # fmt: skip
    move.add_argument("--to", dest="target", metavar="URL", help="postgresql://... (default: $MANAGED_TOOLS_DATABASE)")
    move.add_argument("--replace", action="store_true", help="empty a target that already holds state first")
    move.add_argument("--log-level", type=str.upper, default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


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
    # Every command that reads the state or the configuration: a failure is one line, its traceback at debug.
    where.add_argument(
        "--log-level",
        type=str.upper,
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="how much to log on stderr, in any case; debug also shows a failure's traceback (default: WARNING)",
    )
    extend = argparse.ArgumentParser(add_help=False)  # serve and tools: the catalogue as served
    extend.add_argument(
        "--tools-module",
        metavar="MODULE",
        action="append",
        default=[],
        help="load your own tools, resources and prompts from MODULE, a module name or a .py file path "
        "(its TOOLS, RESOURCES, PROMPTS)",
    )
    select = _selection_flags()
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_postgresql(where, commands)

    serve = commands.add_parser(
        "serve",
        parents=[where, extend, select],
        help="serve the catalogue over stdio (one local client) or HTTP (remote clients)",
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
        "--skills-dir", metavar="DIR", action="append", default=[],
        help="also serve the SKILL.md skills below DIR (repeatable; later ones win by name)",
    )  # fmt: skip
    confine = serve.add_argument_group("confinement of spawned programs (docs/security.md)")
    confine.add_argument(
        "--require-confinement",
        action="store_true",
        help="refuse to start unless the kernel confines every spawned program (Landlock)",
    )
    confine.add_argument(
        "--auto-sandboxed",
        action="store_true",
        help="run shell_run and shell_exec without asking when they run inside the full sandbox (audited); a call "
        "that needs more (a missing layer, unrestricted network) still asks (config: autoSandboxed)",
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
    _remote_flags(serve)

    tools = commands.add_parser(
        "tools",
        parents=[where, extend, select],
        help="print the toolsets and the tool catalogue as served here (config.json's tools, --tools-module's too)",
    )
    tools.add_argument("--json", action="store_true", help="one JSON document for machines")

    pending = commands.add_parser(
        "pending", parents=[where, extend, select], help="list permission requests waiting for a person"
    )
    pending.add_argument("--json", action="store_true", help="one JSON document for machines")
    for name, verb in (("approve", "approve"), ("deny", "refuse")):
        sub = commands.add_parser(name, parents=[where, extend, select], help=f"{verb} a waiting permission request")
        sub.add_argument("request_id", metavar="ID")
        sub.add_argument("--note", help="a note recorded with the decision (the model sees it on a denial)")
        if name == "approve":
            sub.add_argument(
                "--remember",
                choices=["once", "session"],
                default="once",
                help="once (default): this call runs once; session: this exact command, cwd and env run again "
                "unasked for the rest of the session",
            )
    respond = commands.add_parser(
        "respond", parents=[where, extend, select], help="answer a custom tool's request with its result"
    )
    respond.add_argument("request_id", metavar="ID")
    respond.add_argument("--json", dest="answer", required=True, metavar="OBJECT", help="the result, a JSON object")
    stop = commands.add_parser("interrupt", parents=[where], help="clear a session's open requests; it goes idle")
    stop.add_argument("--session", metavar="ID", help="the session (default: the one session with open requests)")
    stop.add_argument("--note", help="a note recorded with the interrupt")
    _secret_parser(commands, where)
    _adopt_parser(commands)
    # The default data dir as a path a person can copy: an epilog kept raw (help text is wrapped at hyphens).
    for name in ("serve", "tools", "pending", "approve", "deny", "respond", "interrupt"):
        commands.choices[name].epilog = (
            f"State lives by default in {state_root() / '<workspace name>-<hash of its path>'}\n"
            "(one directory per workspace, outside every mount); --data-dir DIR chooses another."
        )
        commands.choices[name].formatter_class = argparse.RawDescriptionHelpFormatter
    return parser, commands.choices


def _remote_flags(serve: argparse.ArgumentParser) -> None:
    """The HTTP and SSE transports' options, then OAuth's."""
    remote = serve.add_argument_group("remote clients (--transport http or sse)")
    remote.add_argument("--host", help="the address to listen on (default: 127.0.0.1; any other needs a token)")
    remote.add_argument("--port", type=int, help="the port (default: 8765; 0 picks a free one, printed on stderr)")
    remote.add_argument(
        "--stateless", action="store_true", default=None, help="no MCP sessions: no pushed questions (docs/remote.md)"
    )
    remote.add_argument(
        "--token-file",
        type=Path,
        help=f"a file holding the bearer token (default: ${TOKEN_ENV}, else one the server keeps in the data dir "
        "and prints at start-up)",
    )
    remote.add_argument(
        "--no-token",
        action="store_true",
        default=None,
        help="loopback only: accept requests without a bearer token. RISKY: any program on this machine, a command "
        "the tools run included, can then call every tool and answer its own permission questions",
    )
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
    remote.add_argument(
        "--replica", metavar="NAME", help="this replica's name behind a balancer, for sticky sessions (docs/scaling.md)"
    )
    _oauth_flags(serve)


def _oauth_flags(serve: argparse.ArgumentParser) -> None:
    oauth = serve.add_argument_group("OAuth resource server (--transport http or sse; or config.json `oauth`)")
    oauth.add_argument("--oauth-issuer", metavar="URL", help="accept access tokens (JWTs) from this issuer")
    oauth.add_argument("--oauth-resource", metavar="URL", help="this server's canonical URL, the tokens' audience")
    oauth.add_argument("--oauth-jwks-url", metavar="URL", help="the issuer's keys (default: from its metadata)")
    oauth.add_argument(
        "--oauth-required-scope",
        dest="oauth_required_scopes",
        metavar="SCOPE",
        action="append",
        help="a scope every token must hold (repeatable)",
    )


def _secret_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], where: argparse.ArgumentParser
) -> None:
    """`secret set|list|delete`: a person managing an agent's vault from a terminal."""
    secret = commands.add_parser("secret", help="set, list or delete the secrets in an agent's encrypted vault")
    actions = secret.add_subparsers(dest="secret_command", metavar="ACTION", required=True)
    owner = argparse.ArgumentParser(add_help=False)
    owner.add_argument("--agent", type=_agent, default="default", help="whose vault (default: default)")
    for action, text in (
        ("set", "store NAME, read without echo (or from a pipe), encrypted"),
        ("list", "list the names in the vault, never the values"),
        ("delete", "delete NAME from the vault"),
    ):
        sub = actions.add_parser(action, parents=[where, owner], help=text)
        if action != "list":
            sub.add_argument("name", metavar="NAME")
        sub.epilog = f"State lives by default in {state_root() / '<workspace name>-<hash of its path>'}."


def _adopt_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`adopt`: the only way an old in-workspace data dir (`<workspace>/.managed-tools`) is ever used again."""
    adopt = commands.add_parser(
        "adopt",
        help="move your old <workspace>/.managed-tools to the data dir, after showing what it holds (serve ignores it)",
    )
    adopt.add_argument("--workspace", type=Path, help="the workspace holding .managed-tools (default: .)")
    adopt.add_argument("--data-dir", type=Path, help="where to move it (default: the workspace's data dir, below)")
    adopt.add_argument(
        "--yes", action="store_true", help="adopt without asking (needed without a terminal); read what it takes first"
    )
    adopt.add_argument("--log-level", type=str.upper, default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    adopt.epilog = (
        "A cloned repository can ship a .managed-tools whose config.json pre-approves tools and starts programs:\n"
        "adopt only a directory you made yourself. It must not already exist at the target (never merged).\n"
        f"The data dir defaults to {state_root() / '<workspace name>-<hash of its path>'}."
    )
    adopt.formatter_class = argparse.RawDescriptionHelpFormatter


def main(argv: list[str] | None = None) -> int:
    parser, subcommands = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command they were given to, with its usage (argparse would show the top level's)
        command = parser if args.command is None else subcommands[args.command]
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    from managed_tools.server import commands

    return commands.run(args)
