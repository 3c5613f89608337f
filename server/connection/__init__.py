"""One client's connection: its SDK state and teardown (state.py), the durable session and wake it is attached to
(attach.py), and the catalogue's ports implemented over one MCP request (ports.py: progress, sampling, the client's
log and model).

May import: `server`, `tools`, `stores`.
"""
