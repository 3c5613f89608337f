"""The managed catalogue: the tool families (one package each) over the framework in `tools.framework` (definitions,
the registry, the executor, ports).

Never imports `mcp` or `server` (docs/architecture.md §1): the outside world reaches handlers through the ports
in `tools.framework.ports`.
"""
