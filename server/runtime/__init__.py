"""The process: opening the process-wide runtime (opening.py: the state database, the registry, the upstreams, the
environment), what a killed process left behind (leftovers.py), the vault of a data dir and the `secret` command
(secrets.py), extension modules (extensions.py), sessions run headless by the operator's model (headless.py),
OpenTelemetry (otel.py), and the signals that stop a server (stopping.py).

May import: `server.providers`, `server.upstream`, `server.consent`, `server.config`, `server`, `tools`, `stores`,
`sandbox`.
"""
