"""server/config/ (docstring: issue 36 hand commit)."""
