"""Upstream MCP servers behind our gate: config.json `mcpServers`, each connected with the SDK's client, its tools
published as `<name>__<tool>` (ownership `mcp`) and every call run through our executor.

spec.py: the configuration entries; secrets.py: `${vault:NAME}` in env and headers; process.py: a stdio upstream
spawned confined and its transport; tools.py: an upstream's tools as our definitions, its results as our output;
upstream.py: one upstream's life (connect, list, re-list, restart with backoff, close); fleet.py: all of them.
"""
