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
from tools.uris import parse

RESOURCE_NOT_FOUND = -32002


class Notifier:
    """Who wants to hear about which resource, across every connection of this process."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self._subscribers: dict[str, set[ServerSession]] = {}

    def subscribe(self, uri: str, session: ServerSession) -> None:
        if parse(uri) is None:
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


def listing(session_id: str) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[
            types.Resource(uri=r.uri, name=r.name, title=r.title, description=r.description, mime_type=r.mime_type)
            for r in resources.listing(session_id)
        ]
    )


def templates() -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(
        resource_templates=[
            types.ResourceTemplate(
                uri_template=t.uri_template, name=t.name, description=t.description, mime_type=t.mime_type
            )
            for t in resources.TEMPLATES
        ]
    )


def not_found(exc: StoreError) -> MCPError:
    return MCPError(code=RESOURCE_NOT_FOUND, message=str(exc))
