"""server/auth/ (docstring: issue 36 hand commit)."""
