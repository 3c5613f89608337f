"""server/http/ (docstring: issue 36 hand commit)."""
