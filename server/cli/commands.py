"""What each `managed-tools` command does, once server/cli/command.py has parsed its arguments.

A person approving a paused call is on the agent's critical path, so the approval commands (`pending`, `approve`,
`deny`, `respond`, `interrupt`), the views of what agents did (`sessions`, `events`, `memory`, `outcomes`,
`approvals`, `audit export`), `wakes`, `dashboard` (and its page server) and `where` load only the stores and the
config files: not the MCP SDK, not the catalogue's hundreds of models. Those load with server/cli/serving.py (`serve`,
`tools`, `migrate`), or when an approval command's tool selection hides some tools and it must know which. `secret`
loads the whole configuration (server/config/serve_config.py), not the SDK.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from managed_tools.server.cli.arguments import cut_short_quietly, serve_config
from managed_tools.server.cli.failures import reported
from managed_tools.server.config.config_files import ConfigFiles
from managed_tools.server.config.data_dir import ConfigError
from managed_tools.server.config.state_place import StatePlace

if TYPE_CHECKING:
    from managed_tools.tools.framework.definitions.definition import ToolDefinition
    from managed_tools.tools.framework.definitions.registry import Registry

ANSWERING = ("pending", "approve", "deny", "respond", "interrupt")
VIEWS = ("sessions", "events", "memory", "outcomes", "approvals")


def run(args: argparse.Namespace) -> int:
    """Carry out a parsed command line (server/cli/command.py parses it without loading any of this).

    Whatever stops a command is one line on stderr and a non-zero status; `--log-level debug` adds the traceback.
    """
    try:
        if args.command in ANSWERING:
            return cut_short_quietly(lambda: _answer(args))
        if args.command == "dashboard":
            import anyio

            from managed_tools.server.dashboard import serving as dashboard

            anyio.run(dashboard.run, StatePlace.of(args))
            return 0
        if args.command == "wakes":
            return cut_short_quietly(lambda: _wakes(args))
        if args.command == "memory" and args.words[:1] in (["export"], ["import"]):
            from managed_tools.server.cli import carry

            return cut_short_quietly(lambda: carry.run(args))
        if args.command in VIEWS:
            from managed_tools.server.cli import views

            return cut_short_quietly(lambda: views.run(args))
        if args.command == "audit":
            from managed_tools.server.cli import audit

            return cut_short_quietly(lambda: audit.run(args))
        if args.command == "where":
            from managed_tools.server.cli import where

            return where.run(args)
        if args.command == "secret":
            return cut_short_quietly(lambda: _secret(args))
        if args.command == "adopt":
            from managed_tools.server.cli.adopt import adopt

            return adopt(args.workspace, args.data_dir, yes=args.yes)
        if args.command in ("serve", "tools"):
            _refuse_unknown_selection(args)
        if args.command == "serve":
            from managed_tools.sandbox import confine

            confine.probe_early()  # before the import below, which takes far longer than the probe
            gc.disable()  # until start-up is over (serving.collecting_from_here)
        try:
            from managed_tools.server.cli import serving

            return serving.run(args)
        finally:
            gc.unfreeze()
            gc.enable()
    except Exception as exc:
        return reported(exc, args.command, args.log_level)


def _refuse_unknown_selection(args: argparse.Namespace) -> None:
    """A typo in --preset or --toolsets, refused before the catalogue loads (config.json's are checked with it)."""
    from managed_tools.tools.framework.definitions.names import unknown_selection

    toolsets = [name for group in args.toolsets or () for name in group]
    refusal = unknown_selection(args.preset, toolsets)
    if refusal:
        raise ConfigError(refusal)


class ServedTools:
    """The tools served here, as the approval commands ask about them, loaded only when a question needs them.

    With the default selection every tool is served, so no request is hidden and nothing loads; `respond` needs
    the custom tool's output model, built from config.json alone when it is declared there.
    """

    def __init__(self, args: argparse.Namespace, files: ConfigFiles) -> None:
        self._args, self._files = args, files
        self._registry: Registry | None = None

    def hidden(self, name: str) -> bool:
        return not self._serves_everything() and self._catalogue().hidden(name)

    def get(self, name: str) -> ToolDefinition | None:
        from pydantic import TypeAdapter

        from managed_tools.tools.framework.definitions.custom import CustomToolSpec, custom_tool

        declared = self._files.merged.get("customTools")
        specs = TypeAdapter(list[CustomToolSpec]).validate_python(declared if isinstance(declared, list) else [])
        spec = next((s for s in specs if s.name == name), None)
        return custom_tool(spec) if spec is not None else self._catalogue().get(name)

    def _serves_everything(self) -> bool:
        """The flags over config.json's keys select every tool (anything unusual loads the catalogue to decide)."""
        merged = self._files.merged

        def chosen(flag: str, key: str) -> Any:
            given = getattr(self._args, flag, None)  # each repeated flag's names, or None when not given
            return [name for names in given for name in names] if given is not None else merged.get(key)

        toolsets, tools, excluded = (
            chosen("toolsets", "toolsets"),
            chosen("tools", "tools"),
            chosen("exclude_tools", "excludeTools"),
        )
        preset = getattr(self._args, "preset", None)
        if (merged.get("preset") if preset is None else preset) not in (None, "full"):
            return False  # a preset that hides tools (or a name to refuse): the catalogue decides
        read_only = getattr(self._args, "read_only", None)
        read_only = merged.get("readOnly") if read_only is None else read_only
        every = "all" in toolsets if isinstance(toolsets, list) else toolsets is None and not tools
        return every and not excluded and read_only in (None, False)

    def _catalogue(self) -> Registry:
        if self._registry is None:
            from managed_tools.server.cli import serving

            self._registry = serving.approval_registry(self._args)
        return self._registry


def _answer(args: argparse.Namespace) -> int:
    import anyio

    from managed_tools.server.cli.terminal import Screen
    from managed_tools.server.consent import human

    place = StatePlace.of(args)
    files = place.config_files(lenient=True)
    for problem in files.problems:
        print(f"managed-tools: {problem} Fix it before `serve`.", file=sys.stderr)
    served = ServedTools(args, files)
    commands: dict[str, Callable[[], Awaitable[None]]] = {
        "pending": lambda: human.pending(place, served, as_json=args.json, show=Screen.now().show_lines),
        "approve": lambda: human.decide(
            place, served, args.request_id, approve=True, note=args.note, remember=args.remember
        ),
        "deny": lambda: human.decide(place, served, args.request_id, approve=False, note=args.note),
        "respond": lambda: human.respond(place, served, args.request_id, args.answer),
        "interrupt": lambda: human.interrupt(place, args.session, note=args.note),
    }
    anyio.run(commands[args.command])
    return 0


def _wakes(args: argparse.Namespace) -> int:
    import anyio

    from managed_tools.server.cli.wakes_command import wakes

    place = StatePlace.of(args)
    anyio.run(lambda: wakes(place, agent=args.agent, include_done=args.all, as_json=args.json))
    return 0


def _secret(args: argparse.Namespace) -> int:
    import anyio

    from managed_tools.server.runtime import secrets

    config = serve_config(args)
    actions = {"set": secrets.secret_set, "delete": secrets.secret_delete}
    if args.secret_command == "list":
        anyio.run(secrets.secret_list, config)
    else:
        anyio.run(actions[args.secret_command], config, args.name)
    return 0
