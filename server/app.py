"""The MCP server: the low-level `mcp.server.Server` publishing the catalogue over any transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.session import ServerSession
from mcp.server.subscriptions import ListenHandler

from server import SERVER_NAME, __version__, resources
from server.attach import attach, detach
from server.config import DEFAULT_APPROVAL_WAIT_SECONDS
from server.consent import CallConsent
from server.ports import ClientSampler, NoConsent, RequestProgress
from server.publish import to_call_result, to_mcp_tool
from server.resources import Notifier
from server.watch import watch_when_asked
from tools.context import Attachment, Ports, Runtime
from tools.executor import execute, reading_context
from tools.resources import file_listing
from tools.resources import listing as memory_listing
from tools.uris import parse_file

INSTRUCTIONS = (
    "managed-tools runs a managed tool catalogue safely: arguments are validated, state is versioned in SQLite, "
    "and tools marked always_ask wait for a person's approval. Start with environment_describe and "
    "session_get_snapshot."
)


TIMEOUT_META_KEY = "managed-tools/timeoutMs"


def requested_timeout(meta: Mapping[str, Any] | None) -> float | None:
    """A client may shorten a call's deadline with `_meta["managed-tools/timeoutMs"]` (never lengthen it)."""
    value = (meta or {}).get(TIMEOUT_META_KEY)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value / 1000


@dataclass(frozen=True)
class ConnectionState:
    runtime: Runtime
    attachment: Attachment
    # The sessions this connection subscribed to resource updates with; forgotten when it closes.
    subscribed: set[ServerSession] = field(default_factory=set)
    # Set when the client first looks at file resources: starts watching the files on disk.
    watch: anyio.Event = field(default_factory=anyio.Event)


def build_server(
    runtime: Runtime,
    *,
    transport: str,
    session_id: str | None = None,
    approval_wait_seconds: float = DEFAULT_APPROVAL_WAIT_SECONDS,
) -> Server[ConnectionState]:
    """A server whose every connection attaches to `session_id` (or a new session) and opens a wake.

    `approval_wait_seconds` bounds how long a person has to answer a permission question; it is also the
    lifetime of a sealed `requestState` (2026-07-28).
    """
    listing = types.ListToolsResult(tools=[to_mcp_tool(definition) for definition in runtime.registry])
    notifier = Notifier()

    @asynccontextmanager
    async def lifespan(_: Server[ConnectionState]) -> AsyncIterator[ConnectionState]:
        attachment = await attach(runtime, session_id, transport)
        state = ConnectionState(runtime, attachment)
        try:
            stop = anyio.Event()
            async with anyio.create_task_group() as watcher:
                watcher.start_soon(watch_when_asked, state.watch, stop, runtime, notifier)
                try:
                    yield state
                finally:
                    stop.set()
                    watcher.cancel_scope.cancel()
        finally:
            notifier.forget(state.subscribed)
            await detach(runtime, attachment)

    async def list_tools(
        ctx: ServerRequestContext[ConnectionState], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[ConnectionState], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        attachment = ctx.lifespan_context.attachment
        consent = CallConsent(runtime, attachment, ctx, params, wait_seconds=approval_wait_seconds)
        ports = Ports(
            consent=consent,
            progress=RequestProgress(ctx.session),
            sampler=ClientSampler(ctx.session, ctx.request_id),
        )
        result = await execute(
            runtime, attachment, ports, params.name, params.arguments, timeout_seconds=requested_timeout(params.meta)
        )
        if result.error_kind == "input_required" and consent.input_required is not None:
            return consent.input_required
        if result.touched:
            await notifier.updated(result.touched)
        return to_call_result(result)

    def ports_for(ctx: ServerRequestContext[ConnectionState]) -> Ports:
        return Ports(NoConsent(), RequestProgress(ctx.session), ClientSampler(ctx.session, ctx.request_id))

    async def list_resources(
        ctx: ServerRequestContext[ConnectionState], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        attachment = ctx.lifespan_context.attachment
        ctx.lifespan_context.watch.set()
        async with reading_context(runtime, attachment, ports_for(ctx)) as reader:
            files = await file_listing(reader)
        return resources.listing(memory_listing(attachment.session_id) + files)

    async def list_templates(
        ctx: ServerRequestContext[ConnectionState], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return resources.templates()

    async def read_resource(
        ctx: ServerRequestContext[ConnectionState], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        async with reading_context(runtime, ctx.lifespan_context.attachment, ports_for(ctx)) as reader:
            return await resources.read(reader, params.uri)

    async def subscribe(
        ctx: ServerRequestContext[ConnectionState], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        notifier.subscribe(params.uri, ctx.session)
        ctx.lifespan_context.subscribed.add(ctx.session)
        if parse_file(params.uri) is not None:
            ctx.lifespan_context.watch.set()
        return types.EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[ConnectionState], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        notifier.unsubscribe(params.uri, ctx.session)
        return types.EmptyResult()

    server = Server(
        SERVER_NAME,
        version=__version__,
        title="Managed tools",
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_subscriptions_listen=ListenHandler(notifier.bus),
    )
    # Seals our requestState (2026-07-28): a forged, expired or re-bound state never reaches a handler.
    security = RequestStateSecurity.ephemeral(ttl=approval_wait_seconds, audience=SERVER_NAME)
    server.middleware.append(RequestStateBoundary(security, default_audience=SERVER_NAME))
    return server
