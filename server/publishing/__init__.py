"""server/publishing/ (docstring: issue 36 hand commit)."""
