"""tools/framework/definitions/ (docstring: issue 36 hand commit)."""
