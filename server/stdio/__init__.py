"""server/stdio/ (docstring: issue 36 hand commit)."""
