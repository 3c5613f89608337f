"""The upstreams of one registry, seen from the MCP server: their resources, templates and prompts beside ours,
each read, got and subscribed to on the upstream under whose prefix it is published (names.py), and their list
and update notifications told to every connection of ours.

One gateway per registry (`gateway_for`): the upstreams join it when they start (fleet.py), every server built
on that registry (app.py) reads it and adds its `Notifier`.
"""

from __future__ import annotations

import weakref
from typing import Protocol

import mcp_types as types
from mcp import MCPError

from managed_tools.server.upstream.mirror import Mirror
from managed_tools.server.upstream.names import inner_name, inner_uri
from managed_tools.tools.framework.definitions.registry import Registry

RESOURCE_NOT_FOUND = -32002
MAX_COMPLETIONS = 100  # the spec's cap on completion values per response, ours (server/mcp/library.py) and relayed


class Upstream(Protocol):
    """What the gateway asks of an upstream that joined it (upstream.py's `Upstream`; a Protocol, so that gateway.py
    never imports upstream.py, which imports it)."""

    @property
    def mirror(self) -> Mirror: ...

    async def read(self, uri: str) -> types.ReadResourceResult: ...

    async def subscribe(self, uri: str) -> None: ...

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult: ...

    async def complete(
        self,
        ref: types.PromptReference | types.ResourceTemplateReference,
        argument: dict[str, str],
        context: dict[str, str] | None,
    ) -> types.CompleteResult: ...


class Listener(Protocol):
    """What a server does with an upstream's notifications (server/mcp/resources.py `Notifier`)."""

    async def list_changed(self) -> None: ...

    async def prompts_changed(self) -> None: ...

    async def updated(self, uris: list[str]) -> None: ...


class Gateway:
    def __init__(self) -> None:
        self.upstreams: dict[str, Upstream] = {}
        self._listeners: weakref.WeakSet[Listener] = weakref.WeakSet()  # a server gone stops hearing

    def listen(self, listener: Listener) -> None:
        self._listeners.add(listener)

    # -- told by an upstream --------------------------------------------------------------------------------

    async def resources_changed(self) -> None:
        for listener in list(self._listeners):
            await listener.list_changed()

    async def prompts_changed(self) -> None:
        for listener in list(self._listeners):
            await listener.prompts_changed()

    async def updated(self, uri: str) -> None:
        for listener in list(self._listeners):
            await listener.updated([uri])

    # -- asked by a client of ours --------------------------------------------------------------------------

    def resources(self) -> list[types.Resource]:
        return [r for u in self.upstreams.values() for r in u.mirror.resources]

    def templates(self) -> list[types.ResourceTemplate]:
        return [t for u in self.upstreams.values() for t in u.mirror.templates]

    def prompts(self) -> list[types.Prompt]:
        return [p for u in self.upstreams.values() for p in u.mirror.prompts]

    def owns_prompt(self, name: str) -> bool:
        found = inner_name(name)
        return found is not None and found[0] in self.upstreams

    async def read(self, uri: str) -> types.ReadResourceResult:
        upstream, inner = self._by_uri(uri)
        return await upstream.read(inner)

    async def subscribe(self, uri: str) -> None:
        upstream, inner = self._by_uri(uri)
        await upstream.subscribe(inner)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        found = inner_name(name)
        upstream = self.upstreams.get(found[0]) if found else None
        if found is None or upstream is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {name[:100]}")
        return await upstream.get_prompt(found[1], arguments)

    async def complete(self, params: types.CompleteRequestParams) -> types.CompleteResult | None:
        """Completion of an upstream's prompt or template argument, asked of it; None for a reference not under an
        upstream's prefix."""
        ref = params.ref
        found = inner_name(ref.name) if isinstance(ref, types.PromptReference) else inner_uri(ref.uri)
        upstream = self.upstreams.get(found[0]) if found else None
        if found is None or upstream is None:
            return None
        inner = (
            types.PromptReference(type="ref/prompt", name=found[1])
            if isinstance(ref, types.PromptReference)
            else types.ResourceTemplateReference(type="ref/resource", uri=found[1])
        )
        argument = {"name": params.argument.name, "value": params.argument.value}
        return await upstream.complete(inner, argument, params.context.arguments if params.context else None)

    def _by_uri(self, uri: str) -> tuple[Upstream, str]:
        found = inner_uri(uri)
        upstream = self.upstreams.get(found[0]) if found else None
        if found is None or upstream is None:
            raise MCPError(code=RESOURCE_NOT_FOUND, message=f"No upstream serves {uri[:200]}.")
        return upstream, found[1]


_gateways: weakref.WeakKeyDictionary[Registry, Gateway] = weakref.WeakKeyDictionary()


def gateway_for(registry: Registry, listener: Listener | None = None) -> Gateway:
    """The gateway of the upstreams publishing into `registry` (empty until they start), telling `listener` too."""
    gateway = _gateways.get(registry)
    if gateway is None:
        gateway = _gateways[registry] = Gateway()
    if listener is not None:
        gateway.listen(listener)
    return gateway
