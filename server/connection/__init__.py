"""server/connection/ (docstring: issue 36 hand commit)."""
