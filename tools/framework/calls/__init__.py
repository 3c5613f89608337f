"""tools/framework/calls/ (docstring: issue 36 hand commit)."""
