"""server/runtime/ (docstring: issue 36 hand commit)."""
