"""The sandbox: what confines every process the server spawns, and the path guard every file tool goes through.

The lowest floor beside `stores/` (docs/architecture.md §1, §8): Landlock rulesets and the launcher that enters them,
the one spawn function, the mounts and their path guard, descriptor-based file access, and ripgrep. Never imports
`tools`, `server` or `mcp`.
"""
