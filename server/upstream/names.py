"""An upstream's resources and prompts under its prefix: `upstream://<name>/<its own URI>` and `<name>__<prompt>`.

The prefix is ours, put on whatever the upstream lists, so an upstream naming a URI of ours or another upstream's
(`managed-tools://…`, `upstream://other/…`) only ever names a resource under its own prefix, read from itself.
A URI without our prefix is never sent to an upstream; one with it is never read from our stores.
"""

from __future__ import annotations

import mcp_types as types

from managed_tools.server.config.upstream_spec import UPSTREAM_NAME
from managed_tools.tools.framework.definitions.registry import GROUP_SEPARATOR

SCHEME = "upstream"
PREFIX = f"{SCHEME}://"


def outer_uri(upstream: str, uri: str) -> str:
    return f"{PREFIX}{upstream}/{uri}"


def inner_uri(uri: str) -> tuple[str, str] | None:
    """(upstream, its own URI) for a URI under an upstream's prefix; None for any other URI."""
    if not uri.startswith(PREFIX):
        return None
    name, slash, inner = uri[len(PREFIX) :].partition("/")
    return (name, inner) if slash and inner and UPSTREAM_NAME.fullmatch(name) else None


def outer_name(upstream: str, name: str) -> str:
    return f"{upstream}{GROUP_SEPARATOR}{name}"


def inner_name(name: str) -> tuple[str, str] | None:
    upstream, separator, inner = name.partition(GROUP_SEPARATOR)
    return (upstream, inner) if separator and inner and UPSTREAM_NAME.fullmatch(upstream) else None


def outer_content(upstream: str, block: types.ContentBlock) -> types.ContentBlock:
    """A prompt message's block, with any resource it embeds or links to under the upstream's prefix."""
    if isinstance(block, types.EmbeddedResource):
        inner = block.resource
        return block.model_copy(update={"resource": inner.model_copy(update={"uri": outer_uri(upstream, inner.uri)})})
    if isinstance(block, types.ResourceLink):
        return block.model_copy(update={"uri": outer_uri(upstream, block.uri)})
    return block
