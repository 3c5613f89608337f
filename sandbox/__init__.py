"""The sandbox: what confines every process the server spawns, and the path guard every file tool goes through.

The lowest floor beside `stores/` (docs/architecture.md §1, §8): the policy every layer is built from (policy.py),
Landlock rulesets and the launcher that enters them, bubblewrap's namespaces (bwrap.py), cgroups, the one spawn
function, the layers report (layers.py), the egress proxy and its in-namespace bridge (egress.py, netbridge.c), the
mounts and their path guard, descriptor-based file access, and ripgrep. Never imports `tools`, `server` or `mcp`.
"""
