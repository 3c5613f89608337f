"""The MCP server: the low-level `mcp.server.Server` publishing the catalogue over any transport."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server import CacheHint, InitializationOptions, NotificationOptions, Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import ListenHandler
from pydantic import SecretBytes

from managed_tools.server import SERVER_NAME, __version__
from managed_tools.server.auth.principal import Principal, current_principal
from managed_tools.server.config.user_config import DEFAULT_APPROVAL_WAIT_SECONDS
from managed_tools.server.connection.attach import Attachments, attached
from managed_tools.server.connection.ports import ports_for, set_log_level
from managed_tools.server.consent.board import Pages
from managed_tools.server.consent.consent import CallConsent
from managed_tools.server.consent.secret_input import PageSecretInput
from managed_tools.server.consent.variables import CallVariables, SecretInputFactory
from managed_tools.server.mcp.approval_card import ApprovalCards
from managed_tools.server.mcp.library import Library
from managed_tools.server.mcp.planning_prompts import planning_prompts
from managed_tools.server.mcp.relay import relay_for
from managed_tools.server.mcp.resources import Notifier, Resources
from managed_tools.server.mcp.tasks import TASKS_EXTENSION, Answer, serve, wanted
from managed_tools.server.mcp.wake_scheduler import run_wakes
from managed_tools.server.mcp.watch import watch_skills, watch_tools, watch_when_asked
from managed_tools.server.publishing.instructions import instructions
from managed_tools.server.publishing.listing import ListedOnce
from managed_tools.server.publishing.publish import Reply, to_mcp_tool, to_wire_result
from managed_tools.server.publishing.tool_search import SearchProfile, only, with_reveal
from managed_tools.server.runtime.extensions import Extensions
from managed_tools.server.upstream.gateway import gateway_for
from managed_tools.server.upstream.questions import Questions, asking_for
from managed_tools.stores.sessions import LOCAL_OWNER
from managed_tools.tools.framework.calls.call_result import CallResult
from managed_tools.tools.framework.calls.executor import execute
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.resources import affected

# tools/list is the same for every connection and changes only with the configuration (a restart) or when an
# upstream server's list changes, which tools/list_changed announces: a client may reuse it for a minute. Private:
# off loopback the list is behind a token, and a shared cache would hand it to callers we never authenticated.
# docs/decisions/tools-list-cacheable.md.
TOOLS_LIST_CACHE = CacheHint(ttl_ms=60_000, scope="private")


TIMEOUT_META_KEY = "managed-tools/timeoutMs"
STOPPED = CallResult(
    "cancelled",
    "The server is stopping: this call was cancelled (a command it started was killed). Call it again once the "
    "server is back.",
    error_kind="internal",
)


def requested_timeout(meta: Mapping[str, Any] | None) -> float | None:
    """A client may shorten a call's deadline with `_meta["managed-tools/timeoutMs"]` (never lengthen it)."""
    value = (meta or {}).get(TIMEOUT_META_KEY)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value / 1000


AttachmentsFactory = Callable[[], AbstractAsyncContextManager[Attachments]]
MODERN_ONLY = (TASKS_EXTENSION,)  # extensions the handshake era never hears of (tasks are a 2026-07-28 extension)
END_CALLS_WITHIN_SECONDS = 2.0


QUOTA_REFUSAL = "managed_tools_quota_refusal"  # a request's state key: its principal is past a quota (legacy SSE)


def _quota_refusal(ctx: ServerRequestContext[Attachments]) -> str | None:
    """Why server/http/quotas.py refused this call, when it could not refuse its request with 429 (legacy SSE)."""
    state = getattr(getattr(ctx, "request", None), "scope", {}).get("state", {})
    refusal = state.get(QUOTA_REFUSAL) if isinstance(state, dict) else None
    return refusal if isinstance(refusal, str) else None


class InFlight:
    """The tool calls running now, so that a stop ends each with an answer the transport can still carry (an
    error result saying the server stopped) instead of cutting it off mid-call."""

    def __init__(self) -> None:
        self._running: set[anyio.CancelScope] = set()
        self._owners: Counter[str] = Counter()  # each principal's calls running now (server/http/quotas.py)
        self._idle = anyio.Event()
        self._idle.set()
        self._stopping = False

    @contextmanager
    def running(self, owner: str = LOCAL_OWNER) -> Iterator[anyio.CancelScope]:
        with anyio.CancelScope() as call:
            if self._stopping:
                call.cancel()
            if not self._running:
                self._idle = anyio.Event()
            self._running.add(call)
            self._owners[owner] += 1
            try:
                yield call
            finally:
                self._running.discard(call)
                self._owners[owner] -= 1
                if not self._owners[owner]:
                    del self._owners[owner]
                if not self._running:
                    self._idle.set()

    def of(self, owner: str) -> int:
        """How many calls `owner` has running now."""
        return self._owners[owner]

    async def end_all(self) -> None:
        """Cancel every call (a command one started is killed) and wait, bounded, for their answers."""
        self._stopping = True
        for call in self._running:
            call.cancel()
        with anyio.move_on_after(END_CALLS_WITHIN_SECONDS):
            await self._idle.wait()


class ManagedServer(Server[Attachments]):
    """The SDK's server, saying in the handshake era what it sends: the resource list changes when skills come and
    go, the tool list when an upstream server's tools do (server/mcp/watch.py), the prompt list when its prompts do.
    Every transport asks for its options without any; 2026-07-28 derives them itself."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        handshake = {key: value for key, value in self.extensions.items() if key not in MODERN_ONLY}
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True),
            experimental_capabilities,
            extensions if extensions is not None else handshake,
        )


class PublishedTools:
    """Every served tool as tools/list shows it, built once per registry version; each principal's scopes filter it
    without rebuilding it, and under the search profile (`profile`) each connection's shown tools."""

    def __init__(self, registry: Registry, profile: SearchProfile | None = None) -> None:
        self._registry = registry
        self.profile = profile
        self._version = -1
        self._tools: dict[str, tuple[ToolDefinition, types.Tool]] = {}

    def _current(self) -> dict[str, tuple[ToolDefinition, types.Tool]]:
        if self._version != self._registry.version:
            self._tools = {definition.name: (definition, to_mcp_tool(definition)) for definition in self._registry}
            self._version = self._registry.version
        return self._tools

    def listed(self, principal: Principal) -> list[types.Tool]:
        return [tool for definition, tool in self._current().values() if principal.may_use(definition)]

    async def listed_in(self, ctx: ServerRequestContext[Attachments], principal: Principal) -> list[types.Tool]:
        """What this request's tools/list shows: under the search profile, only the tools its connection sees."""
        tools = self.listed(principal)
        return tools if self.profile is None else only(tools, await self.profile.shown(ctx))

    def input_schema(self, name: str, principal: Principal) -> Mapping[str, Any] | None:
        """What the 2026-07-28 HTTP transport checks a call's `Mcp-Param-*` headers against. Without it the SDK runs
        the whole tools/list handler (every tool validated and dumped) on each tools/call."""
        entry = self._current().get(name)
        if entry is None or not principal.may_use(entry[0]):
            return None
        return entry[1].input_schema


def build_server(
    runtime: Runtime,
    *,
    transport: str,
    session_id: str | None = None,
    approval_wait_seconds: float = DEFAULT_APPROVAL_WAIT_SECONDS,
    attachments: AttachmentsFactory | None = None,
    extensions: Extensions | None = None,
    calls: InFlight | None = None,
    pages: Pages | None = None,
    secret_input: SecretInputFactory | None = None,
    request_state_keys: Sequence[SecretBytes] = (),
    relay: bool = False,
) -> Server[Attachments]:
    """The MCP server over the catalogue; every transport serves this one.

    By default each connection (`Server.run`, which enters the lifespan once per connection: stdio, in-memory)
    attaches to `session_id` (or a new session) and opens a wake labelled `transport`. A transport whose
    lifespan runs once for many connections (Streamable HTTP) passes its own `attachments`, which resolves
    each request instead.

    `approval_wait_seconds` bounds how long a person has to answer a permission question; it is also the
    lifetime of a sealed `requestState` (2026-07-28). The built-in resources (memory stores, evaluations,
    files) and prompts (the planning strategies) are always served, with those of `extensions` beside them.
    A transport that stops on a signal passes `calls`, to end the calls in flight first. `pages` is the
    loopback page server (server/pages/) for permission questions and secrets by URL-mode elicitation;
    `secret_input` builds another URL-mode asker for a missing secret (tests). Without either, a person runs
    `managed-tools secret set NAME`. `request_state_keys` is the ring replicas share
    (server/config/request_state_keys.py); without it a sealed `requestState` is good only in this process. With
    `relay`, resource notifications cross to and from the other server processes sharing the store
    (server/mcp/relay.py).
    """
    # By registry version (upstream servers' tools come and go): each definition beside its MCP tool, so a
    # principal's scopes can filter the list without rebuilding it.
    catalogue = PublishedTools(runtime.registry, SearchProfile(runtime) if runtime.tool_search else None)
    in_flight = calls if calls is not None else InFlight()
    notifier = Notifier()
    library = Library(
        extensions or Extensions(),
        planning_prompts(runtime.registry),
        gateway_for(runtime.registry, notifier),  # the upstreams' resources and prompts, beside ours
        notifier.prompts_listed,
    )
    # Beside the resources, a paused call's approval card for MCP Apps hosts (server/mcp/approval_card.py).
    served, cards = (
        Resources(runtime, library, notifier),
        ApprovalCards(runtime.db, page_only=pages is not None and pages.for_approvals),
    )

    @asynccontextmanager
    async def lifespan(_: Server[Attachments]) -> AsyncIterator[Attachments]:
        source = attachments() if attachments is not None else attached(runtime, session_id, transport)
        async with source as resolved, long_calls.running():
            start, stop = anyio.Event(), anyio.Event()
            served.watch = start
            async with anyio.create_task_group() as watcher:
                watcher.start_soon(watch_when_asked, start, stop, runtime, notifier)
                watcher.start_soon(watch_skills, stop, runtime, notifier)
                watcher.start_soon(watch_tools, runtime, notifier)
                watcher.start_soon(run_wakes, runtime, notifier)
                if relay:
                    watcher.start_soon(relay_for(runtime).run, notifier)
                try:
                    yield resolved
                finally:
                    stop.set()  # the watcher thread checks this; cancelling alone would wait for its timeout
                    watcher.cancel_scope.cancel()

    async def list_tools(
        ctx: ServerRequestContext[Attachments], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        notifier.tools_listed(ctx)
        return types.ListToolsResult(tools=cards.listed(ctx, await catalogue.listed_in(ctx, current_principal())))

    async def call_tool(ctx: ServerRequestContext[Attachments], params: types.CallToolRequestParams) -> Reply:
        if wanted(
            ctx, runtime.registry.get(params.name)
        ):  # a client following long calls as tasks (server/mcp/tasks.py)
            return await long_calls.offload(ctx, params)
        return (await run_call(ctx, params)).reply

    async def run_call(ctx: ServerRequestContext[Attachments], params: types.CallToolRequestParams) -> Answer:
        principal = current_principal()
        refused = _quota_refusal(ctx)
        if refused is not None:
            return Answer(to_wire_result(over := CallResult("error", refused, error_kind="quota_exceeded")), over)
        attachment = await ctx.lifespan_context.resolve(ctx)
        consent = CallConsent(
            runtime,
            attachment,
            ctx,
            params,
            wait_seconds=approval_wait_seconds,
            answers=principal.answers_approvals,
            pages=pages,
        )
        secrets = (
            secret_input(runtime, attachment, ctx, params)
            if secret_input is not None
            else PageSecretInput(pages, ctx, params, attachment, wait_seconds=approval_wait_seconds)
            if pages is not None
            else None
        )
        variables = CallVariables(runtime, attachment, ctx, params, wait_seconds=approval_wait_seconds, secrets=secrets)
        # An upstream this call reaches asks its questions of this caller's person (server/upstream/questions.py).
        with (
            asking_for(Questions(runtime, attachment, ctx, pages=pages, wait_seconds=approval_wait_seconds)),
            in_flight.running(principal.owner) as call,
        ):
            result = await execute(
                runtime,
                attachment,
                with_reveal(ports_for(ctx, consent, variables, runtime.model_provider), catalogue.profile, ctx),
                params.name,
                params.arguments,
                timeout_seconds=requested_timeout(params.meta),
                visible=principal.may_use,
            )
        if call.cancelled_caught:
            return Answer(to_wire_result(STOPPED), STOPPED)
        await notifier.updated(affected(runtime.registry.get(params.name), attachment.session_id, result))
        if result.error_kind == "input_required":
            pending = consent.input_required or variables.input_required
            if pending is not None:
                return Answer(pending, None)
        return Answer(cards.reply(ctx, result), result)

    async def set_logging_level(
        ctx: ServerRequestContext[Attachments], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        set_log_level(ctx, params.level)
        return types.EmptyResult()

    server = ManagedServer(
        SERVER_NAME,
        version=__version__,
        title="Managed tools",
        instructions=instructions(runtime.registry, runtime.db.dialect.name),
        cache_hints={"tools/list": TOOLS_LIST_CACHE},
        lifespan=lifespan,
        on_list_tools=list_tools,
        get_tool_input_schema=lambda name: catalogue.input_schema(name, current_principal()),
        on_list_resources=served.list_resources,
        on_list_resource_templates=served.list_templates,
        on_read_resource=cards.in_front_of(served.read_resource),
        on_subscribe_resource=served.subscribe,
        on_unsubscribe_resource=served.unsubscribe,
        on_subscriptions_listen=served.guarded(ListenHandler(notifier.bus)),
        on_list_prompts=library.list_prompts,
        on_get_prompt=library.get_prompt,
        on_completion=library.complete,
    )
    # Registered directly: the constructor's on_set_logging_level warns that logging is deprecated at
    # 2026-07-28, where this method does not exist; handshake-era clients still use it.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_logging_level)
    # Registered directly too: a call answers with its result's wire form (publish.py `to_wire_result`), a mapping
    # the SDK sends as given, which the constructor's `on_call_tool` (typed `CallToolResult`) does not admit.
    server.add_request_handler("tools/call", types.CallToolRequestParams, cards.in_front_of_calls(call_tool))
    long_calls = serve(server, runtime, run_call)  # the tasks extension (server/mcp/tasks.py)
    # The requestState seal first; under the search profile each connection's list is its own (tools_describe adds
    # to it): never kept.
    server.middleware += [
        _request_state_boundary(request_state_keys, approval_wait_seconds),
        *(
            []
            if catalogue.profile
            else [ListedOnce(runtime.registry, on_hit=notifier.tools_listed, variant=cards.shown_by)]
        ),
    ]
    return server


def _request_state_boundary(keys: Sequence[SecretBytes], ttl: float) -> RequestStateBoundary:
    """Seals our requestState (2026-07-28): a forged, expired or re-bound state never reaches a handler."""
    security = (
        RequestStateSecurity(keys=[key.get_secret_value() for key in keys], ttl=ttl, audience=SERVER_NAME)
        if keys
        else RequestStateSecurity.ephemeral(ttl=ttl, audience=SERVER_NAME)
    )
    return RequestStateBoundary(security, default_audience=SERVER_NAME)
