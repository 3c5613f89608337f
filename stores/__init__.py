"""Persistence: the SQLite database, its migrations and one store per kind of state.

Never imports `tools`, `server` or `mcp` (ARCHITECTURE §1).
"""
