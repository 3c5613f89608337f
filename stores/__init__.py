"""Persistence: one store per kind of state, over the database engines in `stores.db` (SQLite embedded, or
PostgreSQL), with their migrations.

Never imports `tools`, `server` or `mcp` (docs/architecture.md §1).
"""
