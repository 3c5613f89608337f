"""server/consent/ (docstring: issue 36 hand commit)."""
