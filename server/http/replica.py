"""One replica among several behind a balancer (`serve --replica NAME`).

A handshake-era MCP session lives in the process that opened it, so every later request of the session must reach
that process. The balancer cannot know which one from the `initialize` request (it carries no session id yet), and
hashing the session id afterwards sends it anywhere. So the replica names itself in the id it hands out:
`Mcp-Session-Id: NAME.<the SDK's id>`, and the balancer routes on that prefix (deploy/nginx.conf: a `map` from the
prefix to the replica). Requests coming back have the prefix taken off before the SDK sees them. 2026-07-28 requests
carry no MCP session, so any replica serves them (round-robin). Every response names the replica that answered
(`X-Managed-Tools-Replica`), for the operator's logs and tests.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MCP_SESSION_HEADER = b"mcp-session-id"
REPLICA_HEADER = b"x-managed-tools-replica"


class ReplicaRoute:
    def __init__(self, app: ASGIApp, *, name: str) -> None:
        self._app = app
        self._name = name.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        await serve_prefixed(self._app, scope, receive, send, name=self._name, header=REPLICA_HEADER)


async def serve_prefixed(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, *, name: bytes, header: bytes
) -> None:
    """`app` with `name.` taken off the request's `Mcp-Session-Id` and put on the response's, and `header: name`
    on every response (a replica here, a worker in server/http/workers.py)."""
    prefix = name + b"."
    headers = [
        (key, value.removeprefix(prefix) if key == MCP_SESSION_HEADER else value) for key, value in scope["headers"]
    ]

    async def named(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [
                (key, prefix + value if key.lower() == MCP_SESSION_HEADER else value)
                for key, value in message.get("headers", [])
            ] + [(header, name)]
        await send(message)

    await app({**scope, "headers": headers}, receive, named)
