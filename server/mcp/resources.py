"""Resources over MCP: list, templates, read, and "updated" notifications in both protocol eras.

Handshake-era clients subscribe with `resources/subscribe` and get `notifications/resources/updated` on their
connection; 2026-07-28 clients open `subscriptions/listen` and get the same events through the SDK's bus.
Notifications follow the tool calls that changed a resource (`CallResult.touched`), in this process or, through
the relay (server/mcp/relay.py), in any other server process sharing the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from managed_tools.server.connection.attach import Attachments
from managed_tools.server.connection.ports import NoConsent, ports_for
from managed_tools.server.connection.state import connection_of
from managed_tools.server.mcp.library import Library
from managed_tools.server.upstream.names import inner_uri
from managed_tools.stores.errors import StoreError
from managed_tools.stores.skills import Skill
from managed_tools.tools import resources
from managed_tools.tools.framework.calls.executor import reading_context
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.context.scope import scoped_session
from managed_tools.tools.framework.context.uris import ATTACHMENT_SCHEME, SCHEME, parse, parse_attachment, parse_file
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.errors import ToolError

SKILL_SCHEME = "skill"
SKILL_MIME = "text/markdown"

ListenGuard = Callable[
    [ServerRequestContext[Attachments], types.SubscriptionsListenRequestParams],
    Awaitable[types.SubscriptionsListenResult],
]
RESOURCE_NOT_FOUND = -32002


def _remember(listers: dict[Connection, ServerSession], ctx: ServerRequestContext[Any]) -> None:
    connection = connection_of(ctx)
    if connection not in listers:
        connection.exit_stack.callback(listers.pop, connection, None)
    listers[connection] = ctx.session


class Notifier:
    """Who wants to hear about which resource, across every connection of this process; `forward` also sends what
    happened here to the other processes sharing the store (server/mcp/relay.py)."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self._subscribers: dict[str, set[ServerSession]] = {}
        # The connections that listed resources, those that listed tools, and prompts: each by its connection (a
        # session object is made per request, so keeping those would tell a client that listed five times five
        # times, and keep every one), forgotten when the connection ends.
        self._listers: dict[Connection, ServerSession] = {}
        self._tool_listers: dict[Connection, ServerSession] = {}
        self._prompt_listers: dict[Connection, ServerSession] = {}
        self.forward: Callable[[ServerEvent], None] | None = None

    def listed(self, ctx: ServerRequestContext[Any]) -> None:
        _remember(self._listers, ctx)

    def tools_listed(self, ctx: ServerRequestContext[Any]) -> None:
        _remember(self._tool_listers, ctx)

    def prompts_listed(self, ctx: ServerRequestContext[Any]) -> None:
        _remember(self._prompt_listers, ctx)

    async def prompts_changed(self) -> None:
        """The prompt list changed (an upstream server's prompts came, went or changed)."""
        await self.bus.publish(PromptsListChanged())
        await _tell(self._prompt_listers, ServerSession.send_prompt_list_changed)

    async def tools_changed(self) -> None:
        """The tool list changed (an upstream server's tools came, went or changed)."""
        await self.bus.publish(ToolsListChanged())
        await _tell(self._tool_listers, ServerSession.send_tool_list_changed)

    async def list_changed(self) -> None:
        """The resource list changed (a skill came or went): 2026-07-28 listeners and handshake-era listers hear."""
        await self._publish(ResourcesListChanged())

    async def _publish(self, event: ServerEvent) -> None:
        if self.forward is not None:
            self.forward(event)
        await self.deliver(event)

    async def deliver(self, event: ServerEvent) -> None:
        """Tell this process's listeners (2026-07-28) and subscribers or listers (handshake era)."""
        await self.bus.publish(event)
        if isinstance(event, ResourceUpdated):
            for session in list(self._subscribers.get(event.uri, ())):
                try:
                    await session.send_resource_updated(event.uri)
                except Exception:  # a connection that went away stops hearing, nothing more
                    self.unsubscribe(event.uri, session)
        elif isinstance(event, ResourcesListChanged):
            await _tell(self._listers, ServerSession.send_resource_list_changed)

    def subscribe(self, uri: str, session: ServerSession) -> None:
        known = (parse(uri), parse_file(uri), skill_name(uri), parse_attachment(uri), inner_uri(uri))
        if all(found is None for found in known):
            raise MCPError(code=RESOURCE_NOT_FOUND, message=f"No resource {uri} to subscribe to.")
        self._subscribers.setdefault(uri, set()).add(session)

    def unsubscribe(self, uri: str, session: ServerSession) -> None:
        self._subscribers.get(uri, set()).discard(session)

    async def updated(self, uris: Iterable[str]) -> None:
        for uri in uris:
            await self._publish(ResourceUpdated(uri=uri))


async def _tell(listers: dict[Connection, ServerSession], send: Callable[[ServerSession], Awaitable[None]]) -> None:
    """Tell each handshake-era connection that listed something; one that went away stops hearing."""
    for connection, session in list(listers.items()):
        try:
            await send(session)
        except Exception:
            listers.pop(connection, None)


def skill_uri(name: str) -> str:
    return f"{SKILL_SCHEME}://{name}/SKILL.md"


def skill_name(uri: str) -> str | None:
    prefix, suffix = f"{SKILL_SCHEME}://", "/SKILL.md"
    if not (uri.startswith(prefix) and uri.endswith(suffix)):
        return None
    name = uri[len(prefix) : -len(suffix)]
    return name if name and "/" not in name else None


def _skill_resource(skill: Skill) -> types.Resource:
    return types.Resource(
        uri=skill_uri(skill.name), name=f"skill_{skill.name}", title=skill.name, description=skill.description,
        mime_type=SKILL_MIME, size=len(skill.content.encode("utf-8")), _meta={"sha256": skill.sha256},
    )  # fmt: skip


def listing(
    found: list[resources.Resource], skills: list[Skill], extra: list[types.Resource]
) -> types.ListResourcesResult:
    """The built-in resources, the skills, then those of extension modules."""
    return types.ListResourcesResult(
        resources=[
            types.Resource(uri=r.uri, name=r.name, title=r.title, description=r.description, mime_type=r.mime_type)
            for r in found
        ]
        + [_skill_resource(s) for s in skills]
        + extra
    )


async def read_skill(runtime: Runtime, uri: str) -> types.ReadResourceResult:
    name = skill_name(uri)
    await anyio.to_thread.run_sync(runtime.skills.reload)
    skill = None if name is None else runtime.skills.get(name)
    if skill is None:
        raise MCPError(code=RESOURCE_NOT_FOUND, message=f"Unknown skill: {name or uri}.")
    contents = types.TextResourceContents(uri=uri, mime_type=SKILL_MIME, text=skill.content,
                                          _meta={"sha256": skill.sha256})  # fmt: skip
    return types.ReadResourceResult(contents=[contents])


async def read(ctx: ToolContext, uri: str) -> types.ReadResourceResult:
    """A memory store, an evaluation, another session artifact, a workspace or substrate file (text, or base64
    for binary), or an attachment (base64, with its own MIME type)."""
    text: str | None = None
    data: bytes | None = None
    try:
        if (attachment := parse_attachment(uri)) is not None:
            mime, data = await resources.read_attachment(ctx, *attachment)
        elif (virtual := parse_file(uri)) is not None:
            mime, text, data = await resources.read_file(ctx, virtual)
        else:
            mime, text = await resources.read(ctx, uri)
    except (StoreError, ToolError) as exc:
        raise MCPError(code=RESOURCE_NOT_FOUND, message=str(exc)) from exc
    if data is not None:
        blob = types.BlobResourceContents(uri=uri, mime_type=mime, blob=resources.blob(data))
        return types.ReadResourceResult(contents=[blob])
    assert text is not None
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])


def templates(registry: Registry, extra: list[types.ResourceTemplate]) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(
        resource_templates=[
            types.ResourceTemplate(
                uri_template=t.uri_template, name=t.name, description=t.description, mime_type=t.mime_type
            )
            for t in resources.templates(registry)
        ]
        + extra
    )


class Resources:
    """The resources handlers: built-in resources (memory stores, evaluations, workspace and substrate files)
    beside the extensions' (`Library`), told apart by URI."""

    def __init__(self, runtime: Runtime, library: Library, notifier: Notifier) -> None:
        self._runtime = runtime
        self._library = library
        self._notifier = notifier
        self._gateway = library.gateway  # the upstream servers' resources, under their prefixes
        # The current lifespan's "start watching files" event, set when a client first looks at file resources.
        self.watch = anyio.Event()

    @staticmethod
    def _ours(uri: str) -> bool:
        return uri.startswith((f"{SCHEME}://", f"{SKILL_SCHEME}://", f"{ATTACHMENT_SCHEME}://"))

    async def _may_see(self, ctx: ServerRequestContext[Attachments], uri: str) -> None:
        """A session's resource is heard only by those who may read it: the same owner check as a read, without
        reading (what is subscribed to may not exist yet)."""
        found = parse_attachment(uri) or parse(uri)
        if found is None or found[0] is None:
            return
        async with self._reader(ctx) as reader:
            try:
                await scoped_session(reader, found[0])
            except StoreError as exc:
                raise MCPError(code=RESOURCE_NOT_FOUND, message=str(exc)) from exc

    @asynccontextmanager
    async def _reader(self, ctx: ServerRequestContext[Attachments]) -> AsyncIterator[ToolContext]:
        attachment = await ctx.lifespan_context.resolve(ctx)
        async with reading_context(self._runtime, attachment, ports_for(ctx, NoConsent())) as reader:
            yield reader

    async def list_resources(
        self, ctx: ServerRequestContext[Attachments], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self.watch.set()
        self._notifier.listed(ctx)
        async with self._reader(ctx) as reader:
            found = (
                resources.listing(reader.session_id, self._runtime.registry)
                + await resources.attachment_listing(reader)
                + await resources.file_listing(reader)
            )
        await anyio.to_thread.run_sync(self._runtime.skills.reload)
        extra = (await self._library.list_resources(ctx, params)).resources if self._library.has_resources else []
        return listing(found, self._runtime.skills.all(), extra + self._gateway.resources())

    async def list_templates(
        self, ctx: ServerRequestContext[Attachments], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        extra = (await self._library.list_resource_templates(ctx, params)).resource_templates
        return templates(self._runtime.registry, extra + self._gateway.templates())

    async def read_resource(
        self, ctx: ServerRequestContext[Attachments], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        if inner_uri(params.uri) is not None:
            return await self._gateway.read(params.uri)
        if not self._ours(params.uri):
            return await self._library.read_resource(ctx, params)
        if params.uri.startswith(f"{SKILL_SCHEME}://"):
            return await read_skill(self._runtime, params.uri)
        async with self._reader(ctx) as reader:
            return await read(reader, params.uri)

    async def subscribe(
        self, ctx: ServerRequestContext[Attachments], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        if inner_uri(params.uri) is not None:
            await self._gateway.subscribe(params.uri)
            self._notifier.subscribe(params.uri, ctx.session)
            return types.EmptyResult()
        if not self._ours(params.uri):
            return await self._library.subscribe(ctx, params)
        await self._may_see(ctx, params.uri)
        self._notifier.subscribe(params.uri, ctx.session)
        if parse_file(params.uri) is not None:
            self.watch.set()
        return types.EmptyResult()

    def guarded(self, listen: ListenHandler) -> ListenGuard:
        """The 2026-07-28 way to subscribe (`subscriptions/listen`), with the owner check `subscribe` makes."""

        async def handler(
            ctx: ServerRequestContext[Attachments], params: types.SubscriptionsListenRequestParams
        ) -> types.SubscriptionsListenResult:
            for uri in params.notifications.resource_subscriptions or ():
                if self._ours(uri):
                    await self._may_see(ctx, uri)
                elif inner_uri(uri) is not None:
                    await self._gateway.subscribe(uri)
            return await listen(ctx, params)

        return handler

    async def unsubscribe(
        self, ctx: ServerRequestContext[Attachments], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        if inner_uri(params.uri) is not None:  # its upstream stays subscribed: others of ours may be, or come
            self._notifier.unsubscribe(params.uri, ctx.session)
            return types.EmptyResult()
        if not self._ours(params.uri):
            return await self._library.unsubscribe(ctx, params)
        self._notifier.unsubscribe(params.uri, ctx.session)
        return types.EmptyResult()
