"""server/mcp/ (docstring: issue 36 hand commit)."""
