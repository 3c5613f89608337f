"""The search profile's listing (`serve --tool-search`, docs/tool-search.md): which tools a connection's
tools/list shows, and the tools that tools_describe adds to it.

At connect a client sees a small core, the tools sessions of this state called most (span.completed events), or
a fixed list on a fresh state, within CORE_BUDGET model-visible characters, plus tools_search, tools_describe and
tools_call. Every other served tool stays callable: the list only decides what the model reads. tools_describe
adds tools to the list of the connection that asked (known by its wake: one connection's attachment to its
session), and tells that connection with `tools/list_changed` where it can hear it: a handshake-era connection
with a back-channel. A 2026-07-28 request belongs to no connection, so its client calls through tools_call.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from managed_tools.stores.events import most_called_tools
from managed_tools.tools.discovery.tools import OWN
from managed_tools.tools.framework.context.context import Attachment, Ports, Runtime
from managed_tools.tools.framework.definitions.definition import model_visible_chars
from managed_tools.tools.framework.definitions.registry import Registry

# What the core may cost, beside the three search tools, in names + descriptions + input schemas: the search
# profile's whole list at connect stays under 6,600 characters (tests/tools/test_catalogue_budget.py). 4,000 until
# every optional field took null and `edit` took a list of edits (docs/decisions/portable-schemas.md, edit-many.md).
CORE_BUDGET = 4_600
CORE_MAX_TOOLS = 8
MAX_CONNECTIONS = 10_000  # connections whose revealed tools are kept (the oldest forgotten: they list the core)
# A fresh state's core: where a session starts (instructions.py), what it remembers, and the file tools.
FALLBACK_CORE = (
    "environment_describe", "session_get_snapshot", "memory_read", "memory_write", "outcome_define", "read", "edit",
    "glob",
)  # fmt: skip


def choose_core(registry: Registry, most_called: list[str]) -> list[str]:
    """The most called served tools first, then the fallback's, while they fit CORE_BUDGET and CORE_MAX_TOOLS."""
    chosen: list[str] = []
    spent = 0
    for name in dict.fromkeys([*most_called, *FALLBACK_CORE]):
        definition = registry.get(name)
        if definition is None or name in OWN or len(chosen) == CORE_MAX_TOOLS:
            continue
        cost = model_visible_chars(definition)
        if spent + cost <= CORE_BUDGET:
            chosen.append(name)
            spent += cost
    return chosen


async def _wake(ctx: ServerRequestContext[Any]) -> str:
    attachment: Attachment = await ctx.lifespan_context.resolve(ctx)
    return attachment.wake_id


def listening(ctx: ServerRequestContext[Any]) -> bool:
    """Can this request's client hear tools/list_changed on its connection?"""
    return ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and ctx.session.can_send_request


class SearchProfile:
    """The core (chosen once per registry version) and each connection's revealed tools."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._core: tuple[int, list[str]] | None = None
        self._revealed: OrderedDict[str, set[str]] = OrderedDict()  # by wake id, the latest MAX_CONNECTIONS

    async def core(self) -> list[str]:
        version = self._runtime.registry.version
        if self._core is None or self._core[0] != version:
            async with self._runtime.db.read() as tx:
                most_called = await most_called_tools(tx, CORE_MAX_TOOLS * 4)
            self._core = (version, choose_core(self._runtime.registry, most_called))
        return self._core[1]

    async def shown(self, ctx: ServerRequestContext[Any]) -> set[str]:
        """The names this request's tools/list shows: the core, the search tools, and what its connection was
        shown since."""
        revealed = self._revealed.get(await _wake(ctx), set()) if listening(ctx) else set()
        return {*await self.core(), *OWN, *revealed}

    async def reveal(self, ctx: ServerRequestContext[Any], names: list[str]) -> bool:
        """Add `names` to this connection's list and say so; False where the client cannot hear it."""
        if not listening(ctx):
            return False
        wake = await _wake(ctx)
        shown = self._revealed.setdefault(wake, set())
        self._revealed.move_to_end(wake)
        while len(self._revealed) > MAX_CONNECTIONS:
            self._revealed.popitem(last=False)
        if not set(names) <= shown:
            shown.update(names)
            await ctx.session.send_tool_list_changed()
        return True


class ConnectionReveal:
    """The ToolReveal port of one request (tools/framework/context/ports.py)."""

    def __init__(self, profile: SearchProfile, ctx: ServerRequestContext[Any]) -> None:
        self._profile, self._ctx = profile, ctx

    async def reveal(self, names: list[str]) -> bool:
        return await self._profile.reveal(self._ctx, names)


def only(tools: list[types.Tool], names: set[str]) -> list[types.Tool]:
    return [tool for tool in tools if tool.name in names]


def with_reveal(ports: Ports, profile: SearchProfile | None, ctx: ServerRequestContext[Any]) -> Ports:
    """A request's ports, with this connection's reveal under the search profile."""
    return ports if profile is None else replace(ports, reveal=ConnectionReveal(profile, ctx))
