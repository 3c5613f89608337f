"""Persistence: the SQLite database, its migrations and one store per kind of state.

Never imports `tools`, `server` or `mcp` (docs/architecture.md §1).
"""
