"""The managed catalogue: tool definitions, the registry and its rules, the executor, and the tool families.

Never imports `mcp` or `server` (docs/architecture.md §1): the outside world reaches handlers through the ports
in `tools.ports`.
"""
