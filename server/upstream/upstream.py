"""One upstream server's life: connect, list its tools, follow `list_changed`, restart with backoff, close.

Its tools stay published while it restarts and answer at once that it is restarting and when to try again.
At start it publishes the tools it listed last time (remembered.py), which answer at once that it is starting
until it lists its own; an upstream that never started publishes nothing, and a call to one of its names says why.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client import ClientRequestContext
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

from managed_tools.sandbox.confine import Confinement, runs_in, upstream_policy
from managed_tools.sandbox.egress import SOCKET_ENV, Refusal
from managed_tools.sandbox.mounts import Mount
from managed_tools.sandbox.policy import Grant
from managed_tools.sandbox.spawn import Domain
from managed_tools.server.config.upstream_spec import HttpUpstream, StdioUpstream
from managed_tools.server.upstream import process
from managed_tools.server.upstream.gateway import MAX_COMPLETIONS, Gateway
from managed_tools.server.upstream.log_repeats import limited
from managed_tools.server.upstream.mirror import Mirror
from managed_tools.server.upstream.names import outer_content, outer_uri
from managed_tools.server.upstream.questions import Questions, addressee, asking
from managed_tools.server.upstream.remembered import ToolMemory
from managed_tools.server.upstream.secrets import MissingSecret, SecretLookup, resolve
from managed_tools.server.upstream.tools import definitions
from managed_tools.tools.framework.context import telemetry
from managed_tools.tools.framework.definitions.definition import PermissionPolicy, ToolDefinition
from managed_tools.tools.framework.definitions.overrides import ToolOverride, overridden
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.errors import RegistryError, ToolError
from managed_tools.tools.framework.wire.redaction import scrub
from managed_tools.tools.shell.diagnose import CODES, program_note

log = limited("managed_tools.upstream")
CONNECT_SECONDS = 20.0  # for each step of starting (the handshake, each page of its tools)
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
STABLE_SECONDS = 60.0  # an upstream that ran this long before stopping starts again from the first backoff
MAX_LIST_PAGES = 20
MAX_SUBSCRIPTIONS = 1000  # resources of one upstream our clients subscribed to (kept across its restarts)
STARTING = "is starting"
T = TypeVar("T")


class Upstream:
    """One configured upstream and its current connection (None while it is down)."""

    def __init__(
        self,
        name: str,
        spec: StdioUpstream | HttpUpstream,
        *,
        registry: Registry,
        policy: Mapping[str, PermissionPolicy],
        secrets: SecretLookup,
        confinement: Confinement,
        mounts: list[Mount],
        workspace: Path,
        memory: ToolMemory | None = None,
        gateway: Gateway | None = None,
        overrides: Mapping[str, ToolOverride] | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self._registry = registry
        self._policy = policy
        self._overrides = overrides or {}  # config.json `overrides` of its tools, applied as it lists them
        self._secrets = secrets
        self._confinement = confinement
        self._mounts = mounts
        self._workspace = workspace
        self._domain: Domain | None = None
        self._view: tuple[Grant, ...] | None = None  # its domain's grants, to say why its program cannot run
        self._programs = [Path(os.path.realpath(p)) for p in spec.read_paths] if isinstance(spec, StdioUpstream) else []
        self._client: Client | None = None
        self._process: process.UpstreamProcess | None = None
        self._dead = anyio.Event()
        self._relist = anyio.Event()
        self._memory = memory
        self._published = False  # tools of its own (listed now or remembered) are in the registry
        self._listed = False  # it has listed them itself at least once
        self._down = STARTING  # why it is not connected, said after "upstream 'x' "
        self._since = anyio.current_time()
        self._retry_at: float | None = None
        self.attempted = anyio.Event()  # its first start has succeeded or failed
        self.mirror = Mirror(name)  # its resources, templates and prompts, under its prefix
        self._gateway = gateway or Gateway()
        self._relist_resources = anyio.Event()
        self._relist_prompts = anyio.Event()
        self._subscribed: set[str] = set()  # its own URIs
        self._waiting: list[Questions] = []  # the askers of our calls waiting on it now (questions.py)

    async def publish_remembered(self) -> bool:
        """Before it starts: publish the tools it listed last time (True), or say it is starting (False)."""
        tools = None if self._memory is None else await anyio.to_thread.run_sync(self._memory.recall)
        if not tools:
            self._registry.replace_group(self.name, [], absent=self.unavailable)
            return False
        try:
            self._registry.replace_group(self.name, self._definitions(tools))
        except RegistryError as exc:  # a list it could not publish either: wait for its own
            log.warning("upstream %s: its remembered tools are not published: %s", self.name, exc)
            self._registry.replace_group(self.name, [], absent=self.unavailable)
            return False
        self._published = True
        return True

    @property
    def connected(self) -> bool:
        return self._client is not None

    def unavailable(self) -> str:
        """Why a call cannot reach it now, and when to try again (never a host path or a secret)."""
        if self._down == STARTING:
            so_far = int(anyio.current_time() - self._since)
            return f"upstream '{self.name}' {STARTING} ({so_far} s so far); try again shortly."
        seconds = 1 if self._retry_at is None else max(1, math.ceil(self._retry_at - anyio.current_time()))
        wait = f"; try again in {seconds} s"
        return f"upstream '{self.name}' {self._down}{wait}."

    def ready(self) -> None:
        """Before a call of one of its tools asks anyone anything: if it is not connected (starting with its
        remembered tools published, restarting, failed), why, at once, as the call's answer. Not a wait: a call
        answers at once that it is starting (docs/decisions/upstream-start-in-background.md)."""
        if self._client is None:
            raise ToolError(self.unavailable())

    async def run(self) -> None:
        """Keep it connected until cancelled: a failed start or a lost connection waits a backoff (doubling,
        capped) and starts it again."""
        failures = 0
        while True:
            began = anyio.current_time()
            try:
                await self._connected_once()
                log.warning("upstream %s stopped%s", self.name, self._stderr_tail())
                self._down = "stopped and is restarting"
            except MissingSecret as exc:
                log.warning("%s", exc)
                self._down = str(exc).removeprefix(f"upstream '{self.name}' ").rstrip(".")
            except Exception as exc:
                log.warning("upstream %s failed: %s%s%s", self.name, _why(exc), self._stderr_tail(), self._note(exc))
                self._down = "stopped and is restarting" if self._listed else "failed to start (see the server log)"
            if anyio.current_time() - began >= STABLE_SECONDS:
                failures = 0
            delay = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2**failures)
            failures += 1
            self._retry_at = anyio.current_time() + delay
            if not self._published:
                self._registry.replace_group(self.name, [], absent=self.unavailable)
            self.attempted.set()
            await anyio.sleep(delay)
            self._retry_at = None

    async def _connected_once(self) -> None:
        self._dead = anyio.Event()
        self._process = None
        async with AsyncExitStack() as stack:
            # Bounded by the client's read timeout (a cancel scope cannot span entering it: it opens task groups).
            client = await stack.enter_async_context(await self._client_for(stack))
            await self._mirror_lists(client)  # before its tools: once they are published, it is taken as up
            for uri in self._subscribed:
                await _subscribe(client, uri)
            self._client = client  # before its tools are published: a call to one finds it up
            try:
                await self._publish(client)
                self.attempted.set()
                log.info("upstream %s connected", self.name)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._relist_on_change, client)
                    tasks.start_soon(self._relist_others_on_change, client)
                    if self._process is not None:
                        tasks.start_soon(self._watch_exit, self._process)
                    await self._dead.wait()
                    tasks.cancel_scope.cancel()
            finally:
                self._client = None
                had = bool(self.mirror.resources or self.mirror.templates), bool(self.mirror.prompts)
                self.mirror.clear()
                with anyio.CancelScope(shield=True):
                    await self._tell_changed(*had)

    async def _client_for(self, stack: AsyncExitStack) -> Client:
        if isinstance(self.spec, HttpUpstream):
            headers, _ = await resolve(self.name, self.spec.headers, self._secrets)
            http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, follow_redirects=False))
            transport = streamable_http_client(self.spec.url, http_client=http)
        else:
            self._process = await stack.enter_async_context(self._spawn())
            transport = self._process.streams()
        # No sampling callback, so no sampling capability is declared and an upstream asking anyway is refused by
        # the SDK ("Sampling not supported"). A configured model provider (config `models`: the runtime's
        # `model_provider.sampler()`) plugs in here as `sampling_callback`, behind a person's yes.
        return Client(
            transport,
            mode="legacy",  # the handshake era: what every upstream speaks, and it can tell us its list changed
            message_handler=self._on_message,
            elicitation_callback=self._on_elicit,
            cache=None,
            read_timeout_seconds=CONNECT_SECONDS,
        )

    @asynccontextmanager
    async def _spawn(self) -> AsyncIterator[process.UpstreamProcess]:
        spec = self.spec
        assert isinstance(spec, StdioUpstream)
        env, secrets = await resolve(self.name, spec.env, self._secrets)
        home = self._confinement.upstream_home(self.name)
        c = self._confinement
        if self._domain is None and c.mode == "landlock":
            policy = upstream_policy(self.name, self._mounts, home, self._programs, network=c.shell_network,
                                     limits=c.limits, grants=c.grants)  # fmt: skip
            # With the network on, it goes out as the shell's commands do: only through the egress proxy.
            self._domain = c.domain(policy if c.egress is None else c.egress.confine(policy))
            self._view = policy.grants
        async with AsyncExitStack() as stack:
            if c.egress is not None and self._domain is not None:
                channel = await c.egress.open_channel()
                stack.push_async_callback(channel.close)
                channel.notify = functools.partial(_refused, self.name, secrets)
                env = {**env, SOCKET_ENV: str(channel.path)}
            started = await stack.enter_async_context(process.started(
                self.name, [spec.command, *spec.args], domain=self._domain,
                env={**process.base_env(home), **c.upstream_env(self.name), **env},
                cwd=self._workspace, secrets=secrets))  # fmt: skip
            yield started

    async def _watch_exit(self, started: process.UpstreamProcess) -> None:
        await started.exited.wait()
        self._lost()

    def _lost(self) -> None:
        """The connection is gone: calls from now on hear so at once, and the supervisor restarts it."""
        self._client = None
        self._down = "stopped and is restarting"
        self._dead.set()

    def _note(self, exc: Exception) -> str:
        """Why its program could not start, when the sandbox is the cause (the launcher's 126, or a name not on
        its PATH): the install to grant and the config line, as a shell command's 126/127 says it."""
        exited = None if self._process is None else self._process.process.returncode
        if self._view is None or not isinstance(self.spec, StdioUpstream):
            return ""
        if exited not in CODES and not isinstance(exc, FileNotFoundError):
            return ""
        c, view = self._confinement, self._view
        note = program_note([self.spec.command], self._workspace, runs=functools.partial(runs_in, view),
                            grants=c.grants, search=c.shell_path, domain=f"upstream {self.name}'s sandbox")  # fmt: skip
        return "" if note is None else "\n" + note

    def _stderr_tail(self) -> str:
        """The last lines its process wrote on stderr (scrubbed of its secrets), for our log only."""
        lines = list(self._process.stderr) if self._process is not None else []
        return "; its stderr ended with:\n" + "\n".join(lines) if lines else ""

    async def _publish(self, client: Client) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            if not (cursor := page.next_cursor):
                break
        published = self._definitions(tools)
        unknown = sorted((set(self._policy) | set(self._overrides)) - {d.name for d in published})
        if unknown:
            log.warning("upstream %s lists no tool for the policy or override entries %s", self.name,
                        ", ".join(unknown))  # fmt: skip
        self._registry.replace_group(self.name, published)
        self._published = self._listed = True
        if self._memory is not None:
            await anyio.to_thread.run_sync(self._memory.keep, tools)

    def _definitions(self, tools: list[types.Tool]) -> list[ToolDefinition]:
        """Its tools as ours, each with its override; an override that would loosen one is a configuration error,
        said in the log, and that tool is published as the upstream describes it (the stricter way)."""
        found = definitions(self.name, tools, self._call, self._policy, self.ready)
        for index, definition in enumerate(found):
            override = self._overrides.get(definition.name)
            if override is not None:
                try:
                    found[index] = overridden(definition, override)
                except RegistryError as exc:
                    log.error("%s; the override is not applied", exc)
        return found

    async def _relist_on_change(self, client: Client) -> None:
        while True:
            await self._relist.wait()
            self._relist = anyio.Event()
            try:
                await self._publish(client)
            except Exception as exc:
                log.warning("upstream %s: listing its tools again failed: %s", self.name, _why(exc))
                self._lost()

    async def _mirror_lists(self, client: Client) -> None:
        """Its resources and prompts; one it answers with an error is left out, its tools published anyway."""
        try:
            await self.mirror.list_resources(client)
        except MCPError as exc:
            log.warning("upstream %s: its resources are not served: %s", self.name, exc.error.message[:200])
        try:
            await self.mirror.list_prompts(client)
        except MCPError as exc:
            log.warning("upstream %s: its prompts are not served: %s", self.name, exc.error.message[:200])
        await self._tell_changed(bool(self.mirror.resources or self.mirror.templates), bool(self.mirror.prompts))

    async def _tell_changed(self, resources: bool, prompts: bool) -> None:
        if resources:
            await self._gateway.resources_changed()
        if prompts:
            await self._gateway.prompts_changed()

    async def _relist_others_on_change(self, client: Client) -> None:
        """Its resources or prompts again, when it says they changed (on a task of its own: a request made from
        the message handler would wait on the loop that reads its answer)."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._relist_kind, client, "resources")
            tasks.start_soon(self._relist_kind, client, "prompts")

    async def _relist_kind(self, client: Client, kind: str) -> None:
        while True:
            event = self._relist_resources if kind == "resources" else self._relist_prompts
            await event.wait()
            if kind == "resources":
                self._relist_resources = anyio.Event()
            else:
                self._relist_prompts = anyio.Event()
            try:
                if kind == "resources":
                    await self.mirror.list_resources(client)
                else:
                    await self.mirror.list_prompts(client)
            except Exception as exc:
                log.warning("upstream %s: listing its %s again failed: %s", self.name, kind, _why(exc))
                self._lost()
                return
            await self._tell_changed(kind == "resources", kind == "prompts")

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist.set()
        elif isinstance(message, types.ResourceListChangedNotification):
            self._relist_resources.set()
        elif isinstance(message, types.PromptListChangedNotification):
            self._relist_prompts.set()
        elif isinstance(message, types.ResourceUpdatedNotification) and message.params.uri in self._subscribed:
            await self._gateway.updated(outer_uri(self.name, message.params.uri))
        await anyio.lowlevel.checkpoint()

    async def _on_elicit(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        """Its question, asked of the person whose call it is answering (questions.py); declined when no call of
        ours waits on it, or callers of several sessions do."""
        asker = addressee(self._waiting)
        if asker is None:
            log.warning("upstream %s asked a question no single caller of ours waits on; declined", self.name)
            return types.ElicitResult(action="decline")
        return await asker.ask(self.name, params)

    # -- resources and prompts, for a client of ours (gateway.py) -------------------------------------------

    def _connected(self) -> Client:
        if self._client is None:
            raise MCPError(code=types.INTERNAL_ERROR, message=self.unavailable())
        return self._client

    async def read(self, uri: str) -> types.ReadResourceResult:
        result = await self._relayed(self._connected().read_resource(uri))
        contents = [c.model_copy(update={"uri": outer_uri(self.name, c.uri)}) for c in result.contents]
        return types.ReadResourceResult(contents=contents)

    async def subscribe(self, uri: str) -> None:
        client = self._connected()
        if uri in self._subscribed:
            return
        if len(self._subscribed) >= MAX_SUBSCRIPTIONS:
            raise MCPError(code=types.INVALID_REQUEST, message=f"At most {MAX_SUBSCRIPTIONS} of {self.name}'s "
                           "resources can be subscribed to.")  # fmt: skip
        await self._relayed(_subscribe(client, uri))
        self._subscribed.add(uri)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        result = await self._relayed(self._connected().get_prompt(name, arguments))
        messages = [m.model_copy(update={"content": outer_content(self.name, m.content)}) for m in result.messages]
        return types.GetPromptResult(description=result.description, messages=messages)

    async def complete(
        self,
        ref: types.PromptReference | types.ResourceTemplateReference,
        argument: dict[str, str],
        context: dict[str, str] | None,
    ) -> types.CompleteResult:
        """Its completions (none when it offers none), at most MAX_COMPLETIONS of them."""
        client = self._connected()
        if client.server_capabilities.completions is None:
            return types.CompleteResult(completion=types.Completion(values=[]))
        found = (await self._relayed(client.complete(ref, argument, context))).completion
        values = found.values[:MAX_COMPLETIONS]
        more = found.has_more or len(found.values) > MAX_COMPLETIONS
        return types.CompleteResult(completion=types.Completion(values=values, total=found.total, has_more=more))

    async def _relayed(self, request: Awaitable[T]) -> T:
        """Its answer; its error said as its own (bounded), never as ours."""
        try:
            return await request
        except MCPError as exc:
            raise MCPError(code=exc.error.code, message=f"upstream '{self.name}': {exc.error.message[:500]}") from None

    async def _call(self, tool: str, arguments: dict[str, Any], seconds: float) -> types.CallToolResult:
        client = self._client
        if client is None:
            raise ToolError(self.unavailable())
        asker = asking.get()
        if asker is not None:
            self._waiting.append(asker)
        try:
            with telemetry.upstream_call(self.name, tool):
                return await client.call_tool(tool, arguments, read_timeout_seconds=max(seconds, 0.001))
        except MCPError as exc:
            if exc.error.code == types.REQUEST_TIMEOUT:
                raise TimeoutError from None  # the executor says the call did not finish in time
            if exc.error.code != types.CONNECTION_CLOSED:
                raise ToolError(f"upstream '{self.name}' refused {tool}: {exc.error.message[:500]}") from None
            self._lost()
        except (OSError, httpx2.HTTPError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._lost()
        finally:
            if asker is not None:
                self._waiting.remove(asker)
        raise ToolError(
            f"upstream '{self.name}' stopped during {tool}; it is restarting: try again in a few seconds "
            "(whether the call took effect is unknown)."
        )


async def _subscribe(client: Client, uri: str) -> None:
    """`resources/subscribe`: gone in 2026-07-28, and the way on the handshake-era connection we keep to it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.subscribe_resource(uri)


def _why(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:500]


def _refused(name: str, secrets: set[str], refusal: Refusal) -> None:
    """An upstream's refused connection goes to our log (it has no result of ours to carry it), scrubbed of its
    secrets: a host name is the upstream's to choose, and may spell one."""
    log.warning("upstream %s: network blocked: %s", name, scrub(str(refusal), secrets))
