"""What each `managed-tools` command does, once server/cli.py has parsed its arguments.

Kept apart from the parser so that `--version`, `--help` and usage errors answer without loading the MCP SDK.
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError

from managed_tools.sandbox import layers
from managed_tools.server import human, secrets
from managed_tools.server.adopt import adopt
from managed_tools.server.app import InFlight, build_server
from managed_tools.server.config import STATE_FILE, ConfigError, HttpConfig, OAuthConfig, Selecting, ServeConfig
from managed_tools.server.http import announce, bind, build_app, http_server, serve_http
from managed_tools.server.pages.serving import pages_for, serving_pages
from managed_tools.server.publish import to_mcp_tool
from managed_tools.server.rules import DATABASE_ENV
from managed_tools.server.runtime import (
    StartupError,
    configured_registry,
    open_runtime,
    served_registry,
    startup_extensions,
    with_upstream_tools,
)
from managed_tools.server.stdio import serve_stdio
from managed_tools.server.stopping import Stopping, exiting, until_signalled
from managed_tools.stores.db import Database, is_database_url, redacted
from managed_tools.stores.db.transfer import copy_state
from managed_tools.stores.errors import StoreError
from managed_tools.tools.catalogue import PURPOSES
from managed_tools.tools.framework.context import Runtime
from managed_tools.tools.framework.registry import Registry

log = logging.getLogger("managed_tools")


def run(args: argparse.Namespace) -> int:
    """Carry out a parsed command line (server/cli.py parses it without loading any of this).

    Whatever stops a command is one line on stderr and a non-zero status; `--log-level debug` adds the traceback.
    """
    try:
        return _run(args)
    except Exception as exc:
        if args.log_level == "DEBUG":
            traceback.print_exception(exc, file=sys.stderr)
        message, status = _failure(exc, args.command)
        print(f"managed-tools: {message}", file=sys.stderr)
        return status


def _failure(exc: Exception, command: str) -> tuple[str, int]:
    """What a person reads when `command` fails, and the exit status."""
    if isinstance(exc, human.HumanError):
        return str(exc), 1
    if isinstance(exc, ConfigError | StartupError):
        return str(exc), 2
    if isinstance(exc, ValidationError):  # the flags, checked as a whole
        error = exc.errors(include_url=False)[0]
        if exc.title == HttpConfig.__name__:
            field = str(error["loc"][0])
            return f"{REMOTE_FLAGS.get(field, field)}: {error['msg']}", 2
        return f"invalid configuration: {error['msg']}", 2
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:  # a task group's one failure
        exc = exc.exceptions[0]
    return f"{command} stopped on an unexpected error: {type(exc).__name__}: {exc} (--log-level debug shows where).", 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "migrate":
        return anyio.run(_migrate, args)
    if args.command == "adopt":
        return adopt(args.workspace, args.data_dir, yes=args.yes)
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
        skills_dirs=tuple(Path(p) for p in getattr(args, "skills_dir", ())),
        selection=_selecting(args),
        database=args.database or os.environ.get(DATABASE_ENV) or None,
        auto_sandboxed=True if getattr(args, "auto_sandboxed", False) else None,  # else config.json's
    )
    if args.command == "tools":
        registry = served_registry(config, startup_extensions(config))
        anyio.run(_with_upstream_tools, config, registry)
        return _cut_short_quietly(lambda: _print_tools(registry, as_json=args.json))
    if args.command == "serve":
        http = _http_config(args, config)
        confinement = {"require_confinement": args.require_confinement, "shell_network": args.shell_network == "on"}
        return _serve(config.model_copy(update=confinement), http, args.log_level)
    return _cut_short_quietly(lambda: _human(args, config))


async def _with_upstream_tools(config: ServeConfig, registry: Registry) -> None:
    async with secrets.vault_lookup(config) as lookup:
        await with_upstream_tools(config, registry, lookup)


async def _migrate(args: argparse.Namespace) -> int:
    """Copy the SQLite state at --from into the PostgreSQL database at --to, and say what was copied."""
    url = args.target or os.environ.get(DATABASE_ENV)
    if not url or not is_database_url(url):
        raise ConfigError(f"migrate --to takes a postgresql://... URL (or ${DATABASE_ENV}).")
    source_path = args.source.expanduser().resolve()
    if source_path.is_dir():
        source_path = source_path / STATE_FILE
    if not source_path.is_file():
        raise ConfigError(f"No SQLite state at {source_path}: --from takes a data dir or its {STATE_FILE}.")
    try:
        source = await Database.open(source_path)
        try:
            target = await Database.open(url, local_dir=source_path.parent)
            try:
                copied = await copy_state(source, target, replace=args.replace)
            finally:
                await target.close()
        finally:
            await source.close()
    except StoreError as exc:
        raise human.HumanError(str(exc)) from exc
    for entry in copied:
        print(f"{entry.table:<22} {entry.rows:>9} rows")
    print(f"copied {sum(e.rows for e in copied)} rows from {source_path} into {redacted(url)}; verified by counts.")
    return 0


def _cut_short_quietly(command: Callable[[], int]) -> int:
    """A reader that stops early (`| head -1`) ends a printout quietly and successfully, as with other tools."""
    try:
        status = command()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit and would report the same error: point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return status


def _selecting(args: argparse.Namespace) -> Selecting:
    def flattened(name: str) -> tuple[str, ...] | None:
        given = getattr(args, name, None)
        return None if given is None else tuple(n for names in given for n in names)

    return Selecting(
        toolsets=flattened("toolsets"),
        tools=flattened("tools"),
        exclude_tools=flattened("exclude_tools"),
        read_only=getattr(args, "read_only", None),
    )


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
    "no_token": "--no-token",
    "allowed_hosts": "--allowed-host",
    "allowed_origins": "--allowed-origin",
    "max_request_bytes": "--max-request-bytes",
    "max_sessions": "--max-sessions",
    "session_idle_seconds": "--session-idle-timeout",
    "header_timeout_seconds": "--header-timeout",
    "body_timeout_seconds": "--body-timeout",
    "max_connections": "--max-connections",
    "replica": "--replica",
}


OAUTH_FLAGS = {  # OAuthConfig field: the flag that sets it
    "issuer": "--oauth-issuer",
    "resource": "--oauth-resource",
    "jwks_url": "--oauth-jwks-url",
    "required_scopes": "--oauth-required-scope",
}


def _http_config(args: argparse.Namespace, config: ServeConfig) -> HttpConfig | None:
    given = {field: getattr(args, field) for field in REMOTE_FLAGS if getattr(args, field) is not None}
    flags = {field: getattr(args, f"oauth_{field}") for field in OAUTH_FLAGS if getattr(args, f"oauth_{field}")}
    if args.transport == "stdio":
        if given or flags:
            flag = REMOTE_FLAGS[next(iter(given))] if given else OAUTH_FLAGS[next(iter(flags))]
            raise ConfigError(f"{flag} applies to --transport http or sse.")
        return None
    for field in ("allowed_hosts", "allowed_origins"):
        if field in given:
            given[field] = tuple(given[field])
    return HttpConfig.build(
        transport=args.transport, oauth=_oauth(config.oauth, flags), token_dir=config.data_dir, **given
    )


def _oauth(file: OAuthConfig | None, flags: dict[str, Any]) -> OAuthConfig | None:
    """config.json's `oauth`, amended by the flags (which win)."""
    if not flags:
        return file
    merged = {**(file.model_dump() if file is not None else {}), **flags}
    try:
        return OAuthConfig.model_validate(merged)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = str(error["loc"][0])
        raise ConfigError(f"{OAUTH_FLAGS.get(field, field)}: {error['msg']}") from None


def _human(args: argparse.Namespace, config: ServeConfig) -> int:
    served = configured_registry(config, startup_extensions(config))
    commands: dict[str, Callable[[], Awaitable[None]]] = {
        "pending": lambda: human.pending(config, served, as_json=args.json),
        "approve": lambda: human.decide(
            config, served, args.request_id, approve=True, note=args.note, remember=args.remember
        ),
        "deny": lambda: human.decide(config, served, args.request_id, approve=False, note=args.note),
        "respond": lambda: human.respond(config, served, args.request_id, args.answer),
        "interrupt": lambda: human.interrupt(config, args.session, note=args.note),
        "secret": lambda: _secret(args, config),
    }
    anyio.run(commands[args.command])
    return 0


async def _secret(args: argparse.Namespace, config: ServeConfig) -> None:
    if args.secret_command == "set":
        await secrets.secret_set(config, args.name)
    elif args.secret_command == "delete":
        await secrets.secret_delete(config, args.name)
    else:
        await secrets.secret_list(config)


def _serve(config: ServeConfig, http: HttpConfig | None, log_level: str) -> int:
    logging.basicConfig(stream=sys.stderr, level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    atexit.register(exiting)
    try:
        if http is None:
            return anyio.run(until_signalled, partial(_serve_stdio, config))
        return anyio.run(until_signalled, partial(_serve_remote, config, http, log_level))
    except KeyboardInterrupt:  # before or after the event loop listens for signals
        return 130


async def _serve_stdio(config: ServeConfig, stopping: Stopping) -> None:
    extensions = startup_extensions(config)
    async with open_runtime(config, extensions) as runtime, serving_pages(pages_for(config)) as pages:
        _announce_confinement(runtime)
        calls = InFlight()
        server = build_server(
            runtime,
            transport="stdio",
            session_id=config.session,
            approval_wait_seconds=config.approval_wait_seconds,
            extensions=extensions,
            calls=calls,
            pages=pages,
            request_state_keys=config.request_state_keys,
            relay=True,
        )
        log.info("serving agent %s over stdio; data dir %s", config.agent, config.data_dir)
        await serve_stdio(server, calls, stopping)


async def _serve_remote(config: ServeConfig, http: HttpConfig, log_level: str, stopping: Stopping) -> None:
    extensions = startup_extensions(config)
    async with open_runtime(config, extensions) as runtime, serving_pages(pages_for(config)) as pages:
        app = build_app(runtime, config, http, extensions, pages)
        try:
            sock = bind(http)
        except OSError as exc:
            raise StartupError(f"Cannot listen on {http.host} port {http.port}: {exc.strerror or exc}.") from None
        with sock:
            announce(http, sock)  # first on stderr: scripts read the address from its first line
            _announce_confinement(runtime)
            log.info("serving agent %s over %s; data dir %s", config.agent, http.transport, config.data_dir)
            await serve_http(http_server(app, http, log_level), sock, stopping)


def _announce_confinement(runtime: Runtime) -> None:
    """What the kernel does not enforce is said on stderr at start-up, whatever the log level."""
    for notice in runtime.confinement.notices:
        print(f"managed-tools: {notice}", file=sys.stderr)
    c = runtime.confinement
    how = f", spawn {c.spawn}" + (f": {c.spawn_reason}" if c.spawn_reason else "") if c.spawn else ""
    log.info("confinement: %s (Landlock ABI %d%s)", c.mode, c.abi, how)
    found = layers.describe(c)
    if layers.missing(found):
        print(f"managed-tools: {layers.summary(found)}", file=sys.stderr)
    else:
        log.info("%s", layers.summary(found))
    for grant in c.grants.grants:
        log.info("toolchain: the shell may %s %s (%s)", grant.access, grant.path, grant.source)
    if runtime.auto_sandboxed:
        gap = layers.shortfall(c)
        said = f"shell commands ask anyway: {gap}" if gap else "shell commands inside the sandbox run unasked (audited)"
        print(f"managed-tools: --auto-sandboxed: {said}", file=sys.stderr)


def _print_tools(registry: Registry, *, as_json: bool) -> int:
    """The toolsets (what each serves of what it has), then the tools this configuration and these flags serve."""
    everything, served = registry.unfiltered.toolsets(), registry.toolsets()
    toolsets = [(name, len(served.get(name, [])), len(everything.get(name, []))) for name in PURPOSES]
    if as_json:
        listing = [to_mcp_tool(d).model_dump(mode="json", by_alias=True, exclude_none=True) for d in registry]
        sets = [
            {"name": name, "purpose": PURPOSES[name], "served": served.get(name, []),
             "hidden": [n for n in everything.get(name, []) if n not in registry]}
            for name in PURPOSES
        ]  # fmt: skip
        print(json.dumps({"toolsets": sets, "tools": listing}, indent=2))
        return 0
    print(f"{len(PURPOSES)} toolsets (serve --toolsets A,B; default all)\n")
    for name, count, total in toolsets:
        print(f"{name:<12}  {count:>2}/{total:<2} served  {PURPOSES[name]}")
    rows = [
        (d.name, d.permission_policy, "read-only" if d.read_only else "writes", d.description.split(". ")[0])
        for d in registry
    ]
    print(f"\n{len(rows)} tools served (always_ask tools wait for a person's approval)\n")
    width = max((len(name) for name, *_ in rows), default=0)
    for name, policy, mode, summary in rows:
        print(f"{name:<{width}}  {policy:<12}  {mode:<9}  {summary}")
    return 0
