"""A request body read ahead of the transport by a middleware that must see it (the quota gate, the in-flight id
guard), and handed on unchanged: the transport then reads it as if nobody had, and still answers 413 itself."""

from __future__ import annotations

from starlette.types import Message, Receive


async def read(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The request body up to `limit` bytes; whether that is all of it."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False  # the client went away: the transport sees the disconnect
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks), False
        if not message.get("more_body", False):
            return b"".join(chunks), True


def replaying(body: bytes, receive: Receive, whole: bool) -> Receive:
    """A `receive` that gives the body read so far, then (if there was more) the rest from the client."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not whole}
        return await receive()

    return replay
