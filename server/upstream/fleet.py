"""Every configured upstream at once: started beside the runtime, none blocking start-up or another."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from managed_tools.sandbox.confine import Confinement
from managed_tools.sandbox.mounts import Mount
from managed_tools.server.upstream.secrets import SecretLookup, no_vault
from managed_tools.server.upstream.spec import UpstreamSpecs
from managed_tools.server.upstream.upstream import Upstream
from managed_tools.tools.framework.definition import PermissionPolicy
from managed_tools.tools.framework.registry import GROUP_SEPARATOR, Registry

# How long start-up waits for the upstreams' first start, all at once, so that the first tools/list holds
# theirs; one slower than this is published when it comes (tools/list_changed), one that fails is retried.
START_WAIT_SECONDS = 20.0


def upstream_policy(policy: Mapping[str, PermissionPolicy], specs: UpstreamSpecs) -> dict[str, PermissionPolicy]:
    """The per-tool policy entries that name an upstream's tools (`<name>__<tool>`): checked when it lists them."""
    return {tool: p for tool, p in policy.items() if _group(tool) in specs}


def _group(tool: str) -> str | None:
    group, separator, _ = tool.partition(GROUP_SEPARATOR)
    return group if separator else None


@asynccontextmanager
async def running_upstreams(
    specs: UpstreamSpecs,
    registry: Registry,
    *,
    policy: Mapping[str, PermissionPolicy],
    confinement: Confinement,
    mounts: list[Mount],
    workspace: Path,
    secrets: SecretLookup | None = None,
    wait_seconds: float = START_WAIT_SECONDS,
) -> AsyncIterator[list[Upstream]]:
    """Start every upstream, wait (bounded) for each one's first start, and stop them all (their process groups
    killed) on the way out."""
    upstreams = [
        Upstream(
            name,
            spec,
            registry=registry,
            policy={tool: p for tool, p in policy.items() if _group(tool) == name},
            secrets=secrets or no_vault,
            confinement=confinement,
            mounts=mounts,
            workspace=workspace,
        )
        for name, spec in specs.items()
    ]
    async with anyio.create_task_group() as tasks:
        for upstream in upstreams:
            tasks.start_soon(upstream.run)
        with anyio.move_on_after(wait_seconds):
            for upstream in upstreams:
                await upstream.attempted.wait()
        try:
            yield upstreams
        finally:
            tasks.cancel_scope.cancel()
