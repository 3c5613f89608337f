"""The `managed-tools` command. stdout carries the protocol when serving, so every log goes to stderr."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

from managed_tools.server import __version__
from managed_tools.server.config.data_dir import state_root
from managed_tools.server.config.rules import (
    APPROVAL_WAIT_RULE,
    MAX_APPROVAL_WAIT_SECONDS,
    NAME,
    NAME_RULE,
    TOKEN_ENV,
    approval_wait_allowed,
)
from managed_tools.tools.framework.definitions.names import did_you_mean

# Only the parser loads here, so that `--version`, `--help` and usage errors answer at once; the stores load with
# server/cli/commands.py once a command is to run, and the MCP SDK and the catalogue only for those that need them.


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


_INVALID_CHOICE = re.compile(r"argument ([^:]+): invalid choice: '([^']*)'")


class Parser(argparse.ArgumentParser):
    """A usage error is one usage line and the error, not every flag of `serve` (`--help` lists them), with the
    closest word it takes (argparse suggests only from Python 3.14 on)."""

    def error(self, message: str) -> NoReturn:
        positionals = "".join(f" {a.metavar or a.dest}" for a in self._actions if not a.option_strings and a.required)
        usage = f"usage: {self.prog} [options]{positionals}  (all of them: {self.prog} --help)"
        invalid = _INVALID_CHOICE.search(message)
        if invalid:  # the closest of that argument's own choices (argparse names it by its flags or metavar)
            named = set(invalid.group(1).split("/"))
            of = [a for a in self._actions if a.choices and named & {*a.option_strings, a.metavar, a.dest}]
            message += did_you_mean(invalid.group(2), [str(c) for a in of for c in a.choices or ()])
        self.exit(2, f"{usage}\n{self.prog}: error: {message}\n")

    def unknown(self, words: list[str]) -> NoReturn:
        """Arguments this command does not take, each flag with the closest one it does take."""
        flags = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        named = [w + (did_you_mean(w.split("=", 1)[0], flags) if w.startswith("--") else "") for w in words]
        self.error(f"unrecognized arguments: {' '.join(named)}")


def _state_flags(parser: argparse.ArgumentParser) -> None:
    """Every command that reads the state or the configuration."""
    where = parser.add_argument_group("where the state is (see `managed-tools where`)")
    where.add_argument("--workspace", type=Path, help="the project directory mounted at /workspace (default: .)")
    where.add_argument(
        "--data-dir", type=Path, help="where state lives, outside the workspace and every vault (default: below)"
    )
    where.add_argument(
        "--database",
        metavar="URL",
        help="keep the state in PostgreSQL at URL (postgresql://...; default: $MANAGED_TOOLS_DATABASE, else "
        "SQLite in the data dir); put the password in $PGPASSWORD or ~/.pgpass, not in the URL",
    )
    # A failure is one line, its traceback at debug.
    where.add_argument(
        "--log-level",
        type=str.upper,
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="how much to log on stderr, in any case; debug also shows a failure's traceback (default: WARNING)",
    )


def _selection_flags(parser: argparse.ArgumentParser, purpose: str) -> None:
    """serve, tools and the approval commands: which tools are served (a hidden tool's request is never shown)."""
    chosen = parser.add_argument_group(
        f"which tools are served{purpose} (docs/toolsets.md; config.json has the same keys)"
    )
    chosen.add_argument(
        "--tools-module", metavar="MODULE", action="append", default=[],
        help="load your own tools, resources and prompts from MODULE, a module name or a .py file path "
        "(its TOOLS, RESOURCES, PROMPTS)",
    )  # fmt: skip
    _add_preset(chosen)
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


def _add_preset(chosen: argparse._ArgumentGroup) -> None:
    """--preset: the base selection the other selection flags refine (tools/framework/definitions/toolsets.py checks the
    name: a typo gets the same did-you-mean here as in config.json)."""
    chosen.add_argument(
        "--preset", metavar="NAME",
        help="start from a preset, then --toolsets/--tools add and --exclude-tools removes: coding (for clients "
        "with their own file and shell tools), memory, full (default); see docs/presets.md",
    )  # fmt: skip


def _command(
    commands: argparse._SubParsersAction[Parser], name: str, text: str, example: str, *, default_dir: bool = True
) -> Parser:
    """A subcommand whose help ends with an example (and where its state lives by default)."""
    epilog = f"Example:\n  {example}"
    if default_dir:  # a path a person can copy: the epilog is kept raw (help text is wrapped at hyphens)
        epilog += (
            f"\n\nState lives by default in {state_root() / '<workspace name>-<hash of its path>'}\n"
            "(one directory per workspace, outside every mount); --data-dir DIR chooses another."
        )
    return commands.add_parser(
        name, help=text, description=text, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def _parser() -> tuple[Parser, dict[str, Parser]]:
    parser = Parser(
        prog="managed-tools",
        description="An MCP server that publishes a managed tool catalogue and runs its tools safely.",
        epilog="Run 'managed-tools serve' from an MCP client configuration (see mcp.json); "
        "'managed-tools where' shows where everything is.",
    )
    parser.add_argument("--version", action="version", version=f"managed-tools {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    serve = _command(
        commands,
        "serve",
        "serve the catalogue over stdio (one local client) or HTTP (remote clients)",
        "managed-tools serve --workspace ~/projects/app --toolsets files,shell",
    )
    _serve_flags(serve)
    _state_flags(serve)
    _selection_flags(serve, "")
    _confinement_flags(serve)
    _context_flags(serve)
    _remote_flags(serve)

    tools = _command(
        commands,
        "tools",
        "print the toolsets and the tool catalogue as served here (config.json's tools, --tools-module's too)",
        "managed-tools tools --toolsets files,memory",
    )
    tools.add_argument("--json", action="store_true", help="one JSON document for machines")
    _state_flags(tools)
    _selection_flags(tools, "")
    _approval_commands(commands)
    located = _command(
        commands,
        "where",
        "show where this workspace's state, configuration, caches, vault key and skills live",
        "managed-tools where --workspace ~/projects/app --json",
    )
    located.add_argument("--json", action="store_true", help="one JSON document for machines")
    located.add_argument("--agent", type=_agent, default="default", help="whose substrate skills (default: default)")
    _state_flags(located)
    listed = _command(
        commands,
        "wakes",
        "list the wakes sessions scheduled (queued, running, or due and waiting for a client)",
        "managed-tools wakes --all --json",
    )
    listed.add_argument("--all", action="store_true", help="also those already fired, offered, failed or cancelled")
    listed.add_argument("--json", action="store_true", help="one JSON document for machines")
    listed.add_argument("--agent", type=_agent, default="default", help="whose sessions (default: default)")
    _state_flags(listed)
    _view_parsers(commands)
    _audit_parser(commands)
    _migrate_parser(commands)
    _secret_parser(commands)
    _adopt_parser(commands)
    return parser, commands.choices


def _serve_flags(serve: argparse.ArgumentParser) -> None:
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
    serve.add_argument(
        "--transport",
        choices=["stdio", "http", "sse"],
        default="stdio",
        help="stdio (default); http: Streamable HTTP at /mcp plus legacy SSE at /sse; sse: legacy SSE only",
    )


def _context_flags(serve: argparse.ArgumentParser) -> None:
    """What the model reads: which tools are listed at connect, and how list-shaped results are written."""
    read = serve.add_argument_group("what the model reads (docs/tool-search.md)")
    read.add_argument(
        "--tool-search", action=argparse.BooleanOptionalAction, default=None,
        help="list a small core of tools plus tools_search, tools_describe and tools_call, which find and run "
        "every other served tool (config: toolSearch)",
    )  # fmt: skip
    read.add_argument(
        "--result-format", choices=["json", "compact"], default=None,
        help="how list-shaped results (sessions, events, history, search hits, glob) are written for the model: "
        "json (default) or compact, a header line and one line per row; structuredContent is unchanged "
        "(config: resultFormat)",
    )  # fmt: skip


def _confinement_flags(serve: argparse.ArgumentParser) -> None:
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
        help="whether shell_run and the persistent shell have network (default: on): only through the egress proxy, "
        "to config sandbox.network.allowedDomains (empty by default)",
    )


def _approval_commands(commands: argparse._SubParsersAction[Parser]) -> None:
    """pending, approve, deny, respond, interrupt: a person answering paused calls from a terminal. Their own
    arguments come first in their help; the state and selection flags follow."""
    only = " (only their requests are shown)"
    pending = _command(
        commands, "pending", "list permission requests waiting for a person", "managed-tools pending --json"
    )
    pending.add_argument("--json", action="store_true", help="one JSON document for machines")
    for name, verb, example in (
        ("approve", "approve", "managed-tools approve 0193f2c1-7d4e-7b55-9f3e-2a1c9d8e4b10"),
        ("deny", "refuse", "managed-tools deny 0193f2c1-7d4e-7b55-9f3e-2a1c9d8e4b10 --note 'not on main'"),
    ):
        sub = _command(commands, name, f"{verb} a waiting permission request (its ID from `pending`)", example)
        sub.add_argument("request_id", metavar="ID", help="the request's id, as `managed-tools pending` shows it")
        sub.add_argument("--note", help="a note recorded with the decision (the model sees it on a denial)")
        if name == "approve":
            sub.add_argument(
                "--remember",
                choices=["once", "session"],
                default="once",
                help="once (default): this call runs once; session: this exact command, cwd and env run again "
                "unasked for the rest of the session",
            )
    respond = _command(
        commands,
        "respond",
        "answer a custom tool's request with its result",
        'managed-tools respond 0193f2c1-7d4e-7b55-9f3e-2a1c9d8e4b10 --json \'{"answer": "yes"}\'',
    )
    respond.add_argument("request_id", metavar="ID", help="the request's id, as `managed-tools pending` shows it")
    respond.add_argument("--json", dest="answer", required=True, metavar="OBJECT", help="the result, a JSON object")
    for sub in (pending, commands.choices["approve"], commands.choices["deny"], respond):
        _state_flags(sub)
        _selection_flags(sub, only)
    stop = _command(
        commands,
        "interrupt",
        "clear a session's open requests; it goes idle",
        "managed-tools interrupt --session 0193f2c0-1a2b-7c3d-8e4f-5a6b7c8d9e0f",
    )
    stop.add_argument("--session", metavar="ID", help="the session (default: the one session with open requests)")
    stop.add_argument("--note", help="a note recorded with the interrupt")
    _state_flags(stop)
    board = _command(
        commands,
        "dashboard",
        "serve a live dashboard on this machine: sessions, events, approvals to answer, versions, outcomes",
        "managed-tools dashboard --workspace ~/projects/app",
    )
    _state_flags(board)


def _limit(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= 100_000:
        raise argparse.ArgumentTypeError(f"takes a whole number from 1 to 100000; not {value!r}")
    return number


def _view_parsers(commands: argparse._SubParsersAction[Parser]) -> None:
    """sessions, events, memory, outcomes, approvals: what the agents did, read from the state (docs/cli.md)."""
    views = {
        "sessions": ("list the sessions, most recently active first", "managed-tools sessions --agent reviewer"),
        "events": (
            "print a session's events (every tool call's start and end, approvals, wakes); --follow keeps printing",
            "managed-tools events --session 0193f2c0 --type span.completed --follow",
        ),
        "memory": (
            "list memory documents; `memory show TARGET` prints one, --versions its history, --diff A B a change; "
            "`memory export` writes every store, version, learning and substrate version as one bundle, "
            "`memory import FILE` reads one (or --from another memory server's)",
            "managed-tools memory show session_state --session 0193f2c0 --diff 0193f2c1 0193f2c4\n"
            "  managed-tools memory export --out memory.jsonl\n"
            "  managed-tools memory import memory.jsonl --workspace ~/projects/app --dry-run\n"
            "  managed-tools memory import --from basic-memory ~/basic-memory",
        ),
        "outcomes": (
            "list sessions' outcomes and their latest grade; --session ID shows one's criteria and every evaluation",
            "managed-tools outcomes --session 0193f2c0",
        ),
        "approvals": (
            "list permission requests: waiting ones, or with --all every one and who decided it",
            "managed-tools approvals --all --limit 20",
        ),
    }
    for name, (text, example) in views.items():
        sub = _command(commands, name, text, example)
        if name == "memory":
            sub.add_argument(
                "words", nargs="*", metavar="show TARGET | export | import FILE",
                help="show TARGET prints one document (its current text); export and import carry memory",
            )  # fmt: skip
            sub.add_argument("--versions", action="store_true", help="with show: list TARGET's versions")
            sub.add_argument("--diff", nargs=2, metavar=("A", "B"), help="with show: the change from version A to B")
            carry = sub.add_argument_group("export and import (docs/memory-carry.md)")
            carry.add_argument("--out", metavar="FILE", help="with export: write the bundle to FILE (default: stdout)")
            carry.add_argument(
                "--from", dest="source", choices=["bundle", "reference-memory", "basic-memory"], default="bundle",
                help="with import: what FILE is: a bundle (default), the reference memory server's JSON lines, or "
                "a directory of basic-memory notes (made learnings of --agent, default: default)",
            )  # fmt: skip
            carry.add_argument("--dry-run", action="store_true", help="with import: say what would be imported")
        if name in ("events", "memory", "outcomes"):
            sub.add_argument("--session", metavar="ID", help="only this session (its id, or the start of it)")
        if name in ("sessions", "memory"):
            sub.add_argument("--agent", type=_agent, help="only this agent's")
        if name == "events":
            sub.add_argument("--type", metavar="TYPE", action="append", help="only events of TYPE (repeatable)")
            sub.add_argument("--follow", "-f", action="store_true", help="keep printing new events (Ctrl-C stops)")
        if name == "approvals":
            sub.add_argument("--all", action="store_true", help="decided and consumed ones too, newest first")
        sub.add_argument("--limit", type=_limit, default=50, help="show at most N rows, the latest (default: 50)")
        sub.add_argument("--json", action="store_true", help="one JSON document (with --follow: a line per event)")
        _state_flags(sub)


def _audit_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`audit export`: the event log for an operator's SIEM, redacted by a profile."""
    audit = _command(
        commands,
        "audit",
        "export the audit log (every event) as JSON lines or CSV",
        "managed-tools audit export --since 24h --format csv --output audit.csv",
    )
    actions = audit.add_subparsers(dest="audit_command", metavar="ACTION", required=True, parser_class=Parser)
    export = _command(
        actions,
        "export",
        "write every event, oldest first: arguments as their shape only (types and sizes), unless --full",
        "managed-tools audit export --since 2026-11-01 --session 0193f2c0 > audit.jsonl",
    )
    export.add_argument("--since", metavar="WHEN", help="from this date, time (UTC) or age ago: 2026-11-01, 24h, 7d")
    export.add_argument("--session", metavar="ID", help="only this session (its id, or the start of it)")
    export.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="jsonl (default) or csv")
    export.add_argument(
        "--full",
        action="store_true",
        help="also the recorded argument previews, errors and summaries (secrets are removed either way)",
    )
    export.add_argument("--output", "-o", type=Path, metavar="FILE", help="write to FILE (default: stdout)")
    _state_flags(export)


def _migrate_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`migrate` copies an SQLite state into PostgreSQL."""
    move = _command(
        commands,
        "migrate",
        "copy an SQLite state into PostgreSQL (then serve with --database)",
        "managed-tools migrate --from ~/.local/state/managed-tools/workspaces/app-0123456789abcdef "
        "--to postgresql://tools@db.internal/tools",
        default_dir=False,
    )
    move.add_argument("--from", dest="source", required=True, type=Path, metavar="PATH",
                      help="the SQLite state: a data dir, or its state.db")  # fmt: skip
    move.add_argument("--to", dest="target", metavar="URL", help="postgresql://... (default: $MANAGED_TOOLS_DATABASE)")
    move.add_argument("--replace", action="store_true", help="empty a target that already holds state first")
    move.add_argument("--log-level", type=str.upper, default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


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
    remote.add_argument(
        "--workers",
        type=_workers,
        metavar="N|auto",
        help="server processes on the one port (auto: one per CPU; default 1; docs/scaling.md)",
    )
    _oauth_flags(serve)


def _workers(text: str) -> int:
    """`--workers N|auto`: auto is one process per CPU the machine has."""
    if text == "auto":
        return os.cpu_count() or 1
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("takes a number of processes or auto") from None


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


def _secret_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`secret set|list|delete`: a person managing an agent's vault from a terminal."""
    secret = _command(
        commands,
        "secret",
        "set, list or delete the secrets in an agent's encrypted vault",
        "managed-tools secret set GITHUB_TOKEN",
        default_dir=False,
    )
    actions = secret.add_subparsers(dest="secret_command", metavar="ACTION", required=True, parser_class=Parser)
    for action, text, example in (
        ("set", "store NAME, read without echo (or from a pipe), encrypted", "printf %s \"$TOKEN\" | managed-tools "
         "secret set GITHUB_TOKEN"),
        ("list", "list the names in the vault, never the values", "managed-tools secret list --agent reviewer"),
        ("delete", "delete NAME from the vault", "managed-tools secret delete GITHUB_TOKEN"),
    ):  # fmt: skip
        sub = _command(actions, action, text, example)
        if action != "list":
            sub.add_argument("name", metavar="NAME", help="the variable's name, as the tools declare it")
        sub.add_argument("--agent", type=_agent, default="default", help="whose vault (default: default)")
        _state_flags(sub)


def _adopt_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`adopt`: the only way an old in-workspace data dir (`<workspace>/.managed-tools`) is ever used again."""
    adopt = _command(
        commands,
        "adopt",
        "move your old <workspace>/.managed-tools to the data dir, after showing what it holds (serve ignores it)",
        "managed-tools adopt --workspace ~/projects/app",
        default_dir=False,
    )
    adopt.add_argument("--workspace", type=Path, help="the workspace holding .managed-tools (default: .)")
    adopt.add_argument("--data-dir", type=Path, help="where to move it (default: the workspace's data dir, below)")
    adopt.add_argument(
        "--yes", action="store_true", help="adopt without asking (needed without a terminal); read what it takes first"
    )
    adopt.add_argument("--log-level", type=str.upper, default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    adopt.epilog = (
        f"{adopt.epilog}\n\n"
        "A cloned repository can ship a .managed-tools whose config.json pre-approves tools and starts programs:\n"
        "adopt only a directory you made yourself. It must not already exist at the target (never merged).\n"
        f"The data dir defaults to {state_root() / '<workspace name>-<hash of its path>'}."
    )


def main(argv: list[str] | None = None) -> int:
    parser, subcommands = _parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command == "memory":  # `memory import --from basic-memory DIR`: its words may follow its flags
        args.words += [word for word in unknown if not word.startswith("-")]
        unknown = [word for word in unknown if word.startswith("-")]
    if unknown:  # said by the command they were given to, with its usage (argparse would show the top level's)
        (parser if args.command is None else subcommands[args.command]).unknown(unknown)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    from managed_tools.server.cli import commands

    return commands.run(args)
