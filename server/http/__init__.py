"""Remote clients: Streamable HTTP at /mcp and legacy SSE (transport.py), and everything a request passes on its way
in: the Host/Origin allowlists (allowlist.py) read from raw headers (headers.py), the bearer token (token.py), the
listener's settings (config.py), uvicorn's protocol under our connection limits (limits.py, which the page servers
use too), the durable session a request works in (sessions.py), each principal's share of sessions and streams
(shares.py) and quota of calls (quotas.py), and the replica route behind a balancer (replica.py).

May import: `server.mcp`, `server.runtime`, `server.consent`, `server.connection`, `server.auth`, `server.config`,
`tools`, `stores`.
"""
