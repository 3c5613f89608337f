"""server/cli/ (docstring: issue 36 hand commit)."""
