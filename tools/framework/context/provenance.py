"""The provenance rule: what fed a session's writes (docs/trust.md#provenance; stores/provenance.py keeps it).

A write's sources are the tool that wrote it, the session it was written in, and everything that session took in
before it from outside this agent's own work:

- a successful call of an **upstream server's** tool (`<server>__<tool>`): its result, whatever the server is (a
  web fetch, a search, a database), is text someone else controls: `upstream <server>`, untrusted;
- a successful `session_run_child`: **another agent's output** came back: `agent session_run_child`, untrusted.

The session is the unit because the model's context is: once an upstream result is in it, anything the model
writes later may carry its instructions, and no per-write analysis can tell. So an upstream call taints the
session's later writes, until a person vouches: approving a promotion with its sources shown marks them vouched in
the promoted version (stores/provenance.py `vouched`). Workspace files are the person's project and count as
trusted; the shell's network, where on, reaches only the domains the person allowed.
"""

from __future__ import annotations

from managed_tools.stores import events
from managed_tools.stores.provenance import Provenance, Source
from managed_tools.tools.framework.context.context import ToolContext

AGENT_OUTPUT = frozenset({"session_run_child"})  # tools that return another agent's output
UPSTREAM_SEPARATOR = "__"


async def of_session(ctx: ToolContext, tool: str, *extra: Source) -> Provenance:
    """The sources of what `tool` writes now from the calling session: the tool, the session, `extra` (a staged
    file) and every untrusted input the session took in before this call."""
    sources = [Source(kind="tool", name=tool, trust="trusted"), Source(kind="session", name=ctx.session_id,
               trust="trusted"), *extra]  # fmt: skip
    for name in await events.successful_tools(ctx.tx, ctx.session_id):
        definition = ctx.runtime.registry.get(name)
        upstream = definition.ownership == "mcp" if definition is not None else UPSTREAM_SEPARATOR in name
        if upstream:
            sources.append(Source(kind="upstream", name=name.split(UPSTREAM_SEPARATOR, 1)[0], trust="untrusted"))
        elif name in AGENT_OUTPUT:
            sources.append(Source(kind="agent", name=name, trust="untrusted"))
    return Provenance().merged(Provenance(sources=tuple(sources)))


def described(provenance: Provenance) -> str:
    """One line a person or a model reads: the trust and each source."""
    listed = ", ".join(f"{s.kind} {s.name} ({s.trust})" for s in provenance.sources) or "not recorded"
    return f"trust {provenance.trust}; sources: {listed}"


def untrusted_reason(provenance: Provenance) -> str | None:
    """Why promoting content with these sources needs a person, or None when it is trusted."""
    if provenance.trust != "untrusted":
        return None
    bad = ", ".join(f"{s.kind} {s.name}" for s in provenance.sources if s.trust == "untrusted")
    return f"its content derives from untrusted sources ({bad}); a person must vouch before it is shared"


def recorded(ctx: ToolContext, provenance: Provenance) -> Provenance:
    """What a write records: the sources, vouched when a person approved this very call."""
    return provenance.vouched(f"approval {ctx.approval}") if ctx.approval else provenance
