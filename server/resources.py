"""Resources over MCP: list, templates, read, and "updated" notifications in both protocol eras.

Handshake-era clients subscribe with `resources/subscribe` and get `notifications/resources/updated` on their
connection; 2026-07-28 clients open `subscriptions/listen` and get the same events through the SDK's bus.
Notifications follow the tool calls of this process that changed a resource (`CallResult.touched`); a change
made by another server process sharing the database is seen on the next read, not notified.
"""

from __future__ import annotations

from collections.abc import Iterable

import mcp_types as types
from mcp import MCPError
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated

from stores.errors import StoreError
from tools import resources
from tools.context import ToolContext
from tools.uris import parse, parse_file

RESOURCE_NOT_FOUND = -32002


class Notifier:
    """Who wants to hear about which resource, across every connection of this process."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self._subscribers: dict[str, set[ServerSession]] = {}

    def subscribe(self, uri: str, session: ServerSession) -> None:
        if parse(uri) is None and parse_file(uri) is None:
            raise MCPError(code=RESOURCE_NOT_FOUND, message=f"No resource {uri} to subscribe to.")
        self._subscribers.setdefault(uri, set()).add(session)

    def unsubscribe(self, uri: str, session: ServerSession) -> None:
        self._subscribers.get(uri, set()).discard(session)

    def forget(self, sessions: Iterable[ServerSession]) -> None:
        gone = set(sessions)
        for subscribers in self._subscribers.values():
            subscribers.difference_update(gone)

    async def updated(self, uris: Iterable[str]) -> None:
        for uri in uris:
            await self.bus.publish(ResourceUpdated(uri=uri))
            for session in list(self._subscribers.get(uri, ())):
                try:
                    await session.send_resource_updated(uri)
                except Exception:  # a connection that went away stops hearing, nothing more
                    self.unsubscribe(uri, session)


def listing(found: list[resources.Resource]) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[
            types.Resource(uri=r.uri, name=r.name, title=r.title, description=r.description, mime_type=r.mime_type)
            for r in found
        ]
    )


async def read(ctx: ToolContext, uri: str) -> types.ReadResourceResult:
    """A memory store, an evaluation, or a workspace or substrate file (text, or base64 for binary)."""
    try:
        virtual = parse_file(uri)
        if virtual is None:
            mime, text = await resources.read(ctx, uri)
        else:
            mime, maybe_text, data = await resources.read_file(ctx, virtual)
            if data is not None:
                blob = types.BlobResourceContents(uri=uri, mime_type=mime, blob=resources.blob(data))
                return types.ReadResourceResult(contents=[blob])
            assert maybe_text is not None
            text = maybe_text
    except StoreError as exc:
        raise MCPError(code=RESOURCE_NOT_FOUND, message=str(exc)) from exc
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])


def templates() -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(
        resource_templates=[
            types.ResourceTemplate(
                uri_template=t.uri_template, name=t.name, description=t.description, mime_type=t.mime_type
            )
            for t in resources.TEMPLATES
        ]
    )
