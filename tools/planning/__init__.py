"""The planning family: a session's plan and its steps."""
