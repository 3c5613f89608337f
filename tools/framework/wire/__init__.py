"""tools/framework/wire/ (docstring: issue 36 hand commit)."""
