"""The commands that load the catalogue and the MCP SDK: `serve`, `tools` and `migrate`.

server/cli/commands.py runs the others (the approval commands, `where`, `secret`) without importing this module.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import json
import logging
import os
import socket
import sys
from functools import partial
from secrets import token_bytes
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import SecretBytes, ValidationError

from managed_tools.sandbox import layers
from managed_tools.server.cli.arguments import cut_short_quietly, serve_config
from managed_tools.server.cli.failures import reported
from managed_tools.server.cli.terminal import Screen
from managed_tools.server.config.data_dir import tell
from managed_tools.server.config.rules import DATABASE_ENV
from managed_tools.server.config.serve_config import STATE_FILE, ConfigError, ServeConfig
from managed_tools.server.config.user_config import OAuthConfig
from managed_tools.server.consent import human
from managed_tools.server.consent.board import Pages
from managed_tools.server.dashboard import serving as dashboard
from managed_tools.server.http.config import HttpConfig
from managed_tools.server.mcp.app import InFlight, build_server
from managed_tools.server.pages.serving import pages_for, serving_pages
from managed_tools.server.publishing.publish import to_mcp_tool
from managed_tools.server.runtime import secrets
from managed_tools.server.runtime.opening import (
    StartupError,
    configured_registry,
    open_runtime,
    served_registry,
    startup_extensions,
    with_upstream_tools,
)
from managed_tools.server.runtime.otel import Installed, telemetry
from managed_tools.server.runtime.stopping import Stopping, exiting, until_signalled
from managed_tools.server.stdio.transport import serve_stdio
from managed_tools.stores.db import Database, is_database_url, redacted
from managed_tools.stores.db.transfer import copy_state
from managed_tools.stores.errors import StoreError
from managed_tools.tools.catalogue import PURPOSES
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.definitions.registry import Registry

if TYPE_CHECKING:
    from managed_tools.server.http.workers import Place

log = logging.getLogger("managed_tools")


def run(args: argparse.Namespace) -> int:
    """Carry out `serve`, `tools` or `migrate` (server/cli/commands.py reports what stops them)."""
    if args.command == "migrate":
        return anyio.run(_migrate, args)
    config = serve_config(args)
    if args.command == "tools":
        registry = served_registry(config, startup_extensions(config))
        anyio.run(_with_upstream_tools, config, registry)
        return cut_short_quietly(lambda: _print_tools(registry, as_json=args.json))
    http = _http_config(args, config)  # serve
    confinement = {"require_confinement": args.require_confinement, "shell_network": args.shell_network == "on"}
    return _serve(config.model_copy(update=confinement), http, args.log_level)


def approval_registry(args: argparse.Namespace) -> Registry:
    """The catalogue as configured, for an approval command whose selection hides some tools."""
    config = serve_config(args)
    return configured_registry(config, startup_extensions(config))


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
        print(f"{entry.table:<22} {_rows(entry.rows):>14}")
    print(f"copied {_rows(sum(e.rows for e in copied))} from {source_path} into {redacted(url)}; verified by counts.")
    return 0


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


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
    "workers": "--workers",
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
    try:
        return HttpConfig.build(
            transport=args.transport, oauth=_oauth(config.oauth, flags), token_dir=config.data_dir, **given
        )
    except ValidationError as exc:  # the flags, checked as a whole: named as the person typed them
        error = exc.errors(include_url=False)[0]
        field = str(error["loc"][0])
        raise ConfigError(f"{REMOTE_FLAGS.get(field, field)}: {error['msg']}") from None


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


def _uvicorn_named(record: logging.LogRecord) -> bool:
    """uvicorn logs its normal start and stop lines under `uvicorn.error`: shown as `uvicorn`, they read as what
    they are (their level still says when one is an error)."""
    if record.name == "uvicorn.error":
        record.name = "uvicorn"
    return True


def _serve(config: ServeConfig, http: HttpConfig | None, log_level: str) -> int:
    logging.basicConfig(stream=sys.stderr, level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_uvicorn_named)
    atexit.register(exiting)
    try:
        if http is None:
            if sys.stdin.isatty():  # a person ran it by hand: a client is what talks to it, on this stdin
                tell(
                    f"waiting for an MCP client on stdin (workspace {config.workspace}; state in "
                    f"{redacted(config.database) if config.database else config.state_path}). An MCP client starts "
                    "this command itself: run `managed-tools where` to see where everything is, or see the README."
                )
            with telemetry(config.telemetry):
                return anyio.run(until_signalled, partial(_serve_stdio, config))
        if http.workers > 1:
            return _serve_workers(config, http, log_level)
        with telemetry(config.telemetry) as installed:
            return anyio.run(until_signalled, partial(_serve_remote, config, http, log_level, installed))
    except KeyboardInterrupt:  # before or after the event loop listens for signals
        return 130


async def _serve_stdio(config: ServeConfig, stopping: Stopping) -> None:
    extensions = startup_extensions(config)
    async with open_runtime(config, extensions) as runtime, serving_pages(pages_for(config)) as pages:
        _announce_confinement(runtime)
        _offer_dashboard(pages, runtime, config)
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
        collecting_from_here()
        await serve_stdio(server, calls, stopping)


async def _serve_remote(
    config: ServeConfig,
    http: HttpConfig,
    log_level: str,
    installed: Installed | None,
    stopping: Stopping,
    *,
    place: Place | None = None,
) -> None:
    """The server, or with `place` one worker of several (whose parent bound the port and announced it)."""
    # Imported here: the Streamable HTTP and SSE app, its sessions, token and OAuth checks are no part of stdio.
    from managed_tools.server.http.transport import announce, build_app, http_server, serve_http

    extensions = startup_extensions(config)
    async with open_runtime(config, extensions) as runtime, serving_pages(pages_for(config)) as pages:
        app = build_app(runtime, config, http, extensions, pages, telemetry=installed, place=place)
        with contextlib.ExitStack() as stack:
            if place is None:
                sockets = [stack.enter_context(_bound(http))]
                announce(http, sockets[0])  # first on stderr: scripts read the address from its first line
            else:
                sockets = [place.listener, place.peer]
            if place is None or place.first:
                _announce_confinement(runtime)
                _offer_dashboard(pages, runtime, config)
            worker = "" if place is None else f" (worker {place.index} of {place.count}, pid {os.getpid()})"
            log.info("serving agent %s over %s%s; data dir %s", config.agent, http.transport, worker, config.data_dir)
            collecting_from_here()
            if place is not None:
                place.ready()
            await serve_http(http_server(app, http, log_level), sockets, stopping)


def _bound(http: HttpConfig) -> socket.socket:
    from managed_tools.server.http.transport import bind

    try:
        return bind(http)
    except OSError as exc:
        raise StartupError(f"Cannot listen on {http.host} port {http.port}: {exc.strerror or exc}.") from None


def _serve_workers(config: ServeConfig, http: HttpConfig, log_level: str) -> int:
    """`--workers N`: this process binds the port and says where it is, then supervises N workers that serve it
    (server/http/workers.py). Without a configured requestState ring, the workers share one key drawn here."""
    from managed_tools.server.http.transport import announce
    from managed_tools.server.http.workers import Supervisor

    if not config.request_state_keys:
        config = config.model_copy(update={"request_state_keys": (SecretBytes(token_bytes(32)),)})
    with _bound(http) as sock:
        announce(http, sock)
        supervisor = Supervisor(http.workers, sock, config.data_dir, partial(_serve_worker, config, http, log_level))
        return supervisor.run()


def _serve_worker(config: ServeConfig, http: HttpConfig, log_level: str, place: Place) -> int:
    """One worker, to its end; what stops it is said as a single server says it (one line on stderr)."""
    try:
        with telemetry(config.telemetry) as installed:
            return anyio.run(until_signalled, partial(_serve_remote, config, http, log_level, installed, place=place))
    except Exception as exc:
        return reported(exc, "serve", log_level)


def collecting_from_here() -> None:
    """Start-up is over: collect garbage from here. The collector was off while start-up ran (`commands.run`):
    nearly all it allocates (modules, classes, the catalogue) lives as long as the server, and collecting it as it
    grew took 100-200 ms of start-up's CPU, two full collections among them. Frozen (`gc.freeze`), those objects
    are not scanned by any later collection either, which would otherwise pause a call for tens of ms now and then.
    The price: cyclic garbage start-up left stays allocated (idle RSS unchanged, `bench/startup.py`)."""
    gc.freeze()
    gc.enable()


def _offer_dashboard(pages: Pages, runtime: Runtime, config: ServeConfig) -> None:
    """A person at a terminal gets the dashboard's link (a capability: never logged, never sent to a client)."""
    if sys.stderr.isatty():
        board = dashboard.beside_pages(pages, runtime.db, dashboard.where(config))
        print(f"managed-tools: dashboard at {board.url}", file=sys.stderr)


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
    lines = [
        f"{len(PURPOSES)} toolsets (serve --toolsets A,B; default all)",
        "",
        f"{'toolset':<12}  {'tools served':<14}  what for",
    ]
    for name, count, total in toolsets:
        # An upstream's tools are known only once it lists them: every one it listed is counted as served.
        of = f"{count} of {max(total, count)}" if name != "mcp" else f"{count} listed"
        lines.append(f"{name:<12}  {of:<14}  {PURPOSES[name]}")
    rows = [
        (d.name, d.permission_policy, "read-only" if d.read_only else "writes", d.description.split(". ")[0])
        for d in registry
    ]
    lines += ["", f"{len(rows)} tools served (always_ask tools wait for a person's approval)", ""]
    width = max((len(name) for name, *_ in rows), default=0)
    lines += [f"{name:<{width}}  {policy:<12}  {mode:<9}  {summary}" for name, policy, mode, summary in rows]
    screen = Screen.now()  # on a terminal: each line cut to the window, the list paged as git pages
    screen.show("\n".join(screen.cut(line) for line in lines))
    return 0
