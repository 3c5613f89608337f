"""What a handler gets: the call's context and the process-wide runtime (context.py), the ports to the outside
(ports.py), and the parts a context hands out: attachments, budgets, variable sources, which sessions a tool may
reach (scope.py), provenance, resource URIs, what a person approves when a tool runs a command (what_runs.py),
query scoring (retrieval.py) and telemetry. The registry and the definitions it holds are named here for the type
checker only.

May import: `tools.framework.wire`, `stores`, `sandbox`.
"""
