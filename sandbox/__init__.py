"""The sandbox every spawned program runs in: its layers, how a child enters them, and what it may reach.

Never imports `tools`, `server` or `mcp` (docs/architecture.md §1).
"""
