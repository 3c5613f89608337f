"""What one upstream serves besides tools: its resources, resource templates and prompts, listed when it connects
and again when it says a list changed, kept under its prefix (names.py) for our own lists."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import mcp_types as types
from mcp import Client

from managed_tools.server.upstream.names import outer_name, outer_uri

MAX_LIST_PAGES = 20
MAX_ITEMS = 1000  # of each kind: an upstream listing more floods no client of ours
T = TypeVar("T")


async def _pages(fetch: Callable[[str | None], Awaitable[tuple[list[T], str | None]]]) -> list[T]:
    found: list[T] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        items, cursor = await fetch(cursor)
        found.extend(items)
        if not cursor or len(found) >= MAX_ITEMS:
            break
    return found[:MAX_ITEMS]


class Mirror:
    """One upstream's resources, templates and prompts as we publish them (empty while it is down)."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self.resources: list[types.Resource] = []
        self.templates: list[types.ResourceTemplate] = []
        self.prompts: list[types.Prompt] = []

    def clear(self) -> None:
        self.resources, self.templates, self.prompts = [], [], []

    async def list_resources(self, client: Client) -> None:
        if client.server_capabilities.resources is None:
            self.resources, self.templates = [], []
            return

        async def resources(cursor: str | None) -> tuple[list[types.Resource], str | None]:
            page = await client.list_resources(cursor=cursor)
            return page.resources, page.next_cursor

        async def templates(cursor: str | None) -> tuple[list[types.ResourceTemplate], str | None]:
            page = await client.list_resource_templates(cursor=cursor)
            return page.resource_templates, page.next_cursor

        up = self._upstream
        self.resources = [
            r.model_copy(update={"uri": outer_uri(up, r.uri), "name": outer_name(up, r.name)})
            for r in await _pages(resources)
        ]
        self.templates = [
            t.model_copy(update={"uri_template": outer_uri(up, t.uri_template), "name": outer_name(up, t.name)})
            for t in await _pages(templates)
        ]

    async def list_prompts(self, client: Client) -> None:
        if client.server_capabilities.prompts is None:
            self.prompts = []
            return

        async def prompts(cursor: str | None) -> tuple[list[types.Prompt], str | None]:
            page = await client.list_prompts(cursor=cursor)
            return page.prompts, page.next_cursor

        self.prompts = [
            p.model_copy(update={"name": outer_name(self._upstream, p.name)}) for p in await _pages(prompts)
        ]
