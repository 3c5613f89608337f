"""tools/framework/context/ (docstring: issue 36 hand commit)."""
