"""Every configured upstream at once: started beside the runtime, none blocking start-up or another.

Start-up waits a short while (START_WAIT_SECONDS, all together) only for the upstreams it remembers no tools of,
so a quick one is in the first tools/list; one it remembers is published at once from its cache (remembered.py).
Either way a slower one is published when it lists its tools (tools/list_changed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import anyio

from managed_tools.sandbox.confine import Confinement
from managed_tools.sandbox.mounts import Mount
from managed_tools.server.config.upstream_spec import UpstreamSpecs
from managed_tools.server.upstream.gateway import gateway_for
from managed_tools.server.upstream.remembered import ToolMemory
from managed_tools.server.upstream.secrets import SecretLookup, no_vault
from managed_tools.server.upstream.upstream import Upstream
from managed_tools.tools.framework.definitions.definition import PermissionPolicy
from managed_tools.tools.framework.definitions.overrides import ToolOverride
from managed_tools.tools.framework.definitions.registry import GROUP_SEPARATOR, Registry

# How long start-up waits, at most and all together, for the first start of the upstreams with no remembered tools
# (an upstream that hung at initialize held every start-up 21 s). `managed-tools tools` waits LISTING_WAIT_SECONDS:
# it is there to list them.
START_WAIT_SECONDS = 2.0
LISTING_WAIT_SECONDS = 20.0
T = TypeVar("T")


def upstream_entries(entries: Mapping[str, T], specs: UpstreamSpecs) -> dict[str, T]:
    """The per-tool entries (`policy`, `overrides`) that name an upstream's tools (`<name>__<tool>`): checked when
    it lists them."""
    return {tool: entry for tool, entry in entries.items() if _group(tool) in specs}


def _group(tool: str) -> str | None:
    group, separator, _ = tool.partition(GROUP_SEPARATOR)
    return group if separator else None


@asynccontextmanager
async def running_upstreams(
    specs: UpstreamSpecs,
    registry: Registry,
    *,
    policy: Mapping[str, PermissionPolicy],
    overrides: Mapping[str, ToolOverride] | None = None,
    confinement: Confinement,
    mounts: list[Mount],
    workspace: Path,
    secrets: SecretLookup | None = None,
    wait_seconds: float = START_WAIT_SECONDS,
    cache_dir: Path | None = None,
) -> AsyncIterator[list[Upstream]]:
    """Publish what each upstream listed last time (kept in `cache_dir`), start them all, wait (bounded) for the
    first start of those with nothing remembered, and stop them all (their process groups killed) on the way
    out."""
    gateway = gateway_for(registry)
    upstreams = [
        Upstream(
            name,
            spec,
            registry=registry,
            policy={tool: p for tool, p in policy.items() if _group(tool) == name},
            overrides={tool: o for tool, o in (overrides or {}).items() if _group(tool) == name},
            secrets=secrets or no_vault,
            confinement=confinement,
            mounts=mounts,
            workspace=workspace,
            memory=None if cache_dir is None else ToolMemory(cache_dir, name, spec),
            gateway=gateway,
        )
        for name, spec in specs.items()
    ]
    gateway.upstreams.update((upstream.name, upstream) for upstream in upstreams)
    remembered = [await upstream.publish_remembered() for upstream in upstreams]
    async with anyio.create_task_group() as tasks:
        for upstream in upstreams:
            tasks.start_soon(upstream.run)
        with anyio.move_on_after(wait_seconds):
            for upstream, known in zip(upstreams, remembered, strict=True):
                if not known:
                    await upstream.attempted.wait()
        try:
            yield upstreams
        finally:
            tasks.cancel_scope.cancel()
            for upstream in upstreams:
                gateway.upstreams.pop(upstream.name, None)
