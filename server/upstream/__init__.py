"""Upstream MCP servers behind our gate: config.json `mcpServers`, each connected with the SDK's client, its tools
published as `<name>__<tool>` (ownership `mcp`) and every call run through our executor.

secrets.py: `${vault:NAME}` in env and headers; process.py: a stdio upstream spawned confined and its transport;
tools.py: an upstream's tools as our definitions, its results as our output; upstream.py: one upstream's life
(connect, list, re-list, restart with backoff, close); fleet.py: all of them; gateway.py: their resources and
prompts as the MCP server sees them; questions.py: their questions to our person. The configuration entries are
server/config/upstream_spec.py.

May import: `server.consent`, `server.config`, `tools`, `stores`, `sandbox`.
"""
