"""Change notices between the server processes that share one store (replicas, or several stdio servers).

A process that changed a resource publishes a notice ("resource X updated", "the resource list changed"); every
other process receives it and tells its own subscribers. The seam is `NoticeChannel`, two calls wide:

- `publish(notices)`: hand this process's notices to the others (fire and forget: a notice is a hint to re-read,
  so one lost to a locked database costs a refresh, never state);
- `arrivals()`: the other processes' notices, batch by batch, for as long as the caller iterates.

`notice_channel` picks the implementation for a store. On SQLite it is `PolledNotices`: rows appended to the
`notices` table on the appending connection, polled by sequence number (a primary-key range read, cheap enough to
run a few times a second), pruned to the newest rows. On PostgreSQL it is `ListenedNotices`
(stores/notices/postgres.py): LISTEN/NOTIFY, no table.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Literal, Protocol

import anyio
from pydantic import BaseModel, ConfigDict, ValidationError

from managed_tools.stores.db import Database, Row, Tx
from managed_tools.stores.errors import DatabaseUnwritableError

Method = Literal[
    "notifications/resources/updated",
    "notifications/resources/list_changed",
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
]
POLL_SECONDS = 0.2
KEEP_ROWS = 2_000  # far more than all processes publish between two polls
BATCH = 500
MAX_URI_CHARS = 2_048


class Notice(BaseModel):
    """What changed, as the MCP notification that says so (`uri` for an updated resource)."""

    model_config = ConfigDict(frozen=True)

    method: Method
    uri: str | None = None


class NoticeChannel(Protocol):
    async def publish(self, notices: Sequence[Notice]) -> None: ...

    def arrivals(self) -> AsyncIterator[list[Notice]]: ...


class PolledNotices:
    """The SQLite channel: this process's notices are rows tagged with its `origin`; it reads everyone else's."""

    def __init__(self, db: Database, origin: str, *, poll_seconds: float = POLL_SECONDS) -> None:
        self._db = db
        self._origin = origin
        self._poll = poll_seconds

    async def publish(self, notices: Sequence[Notice]) -> None:
        rows = [(self._origin, n.method, n.uri) for n in notices if n.uri is None or len(n.uri) <= MAX_URI_CHARS]
        if not rows:
            return

        async def publishing(tx: Tx) -> None:
            added = await tx.fetchall(
                "INSERT INTO notices (origin, method, uri) VALUES "
                + ", ".join(["(?, ?, ?)"] * len(rows))
                + " RETURNING seq",
                [value for row in rows for value in row],
            )
            last = max(int(row[0]) for row in added)
            await tx.execute("DELETE FROM notices WHERE seq <= ?", (last - KEEP_ROWS,))

        with contextlib.suppress(DatabaseUnwritableError):  # a hint lost: subscribers see it on their next read
            await self._db.record(publishing)

    async def arrivals(self) -> AsyncIterator[list[Notice]]:
        async with self._db.read() as tx:
            seen = int(await tx.scalar("SELECT coalesce(max(seq), 0) FROM notices"))
        while True:
            await anyio.sleep(self._poll)
            async with self._db.read() as tx:
                rows = await tx.fetchall(
                    "SELECT seq, origin, method, uri FROM notices WHERE seq > ? ORDER BY seq LIMIT ?", (seen, BATCH)
                )
            if not rows:
                continue
            seen = rows[-1]["seq"]
            batch = [notice for row in rows if row["origin"] != self._origin and (notice := _notice(row)) is not None]
            if batch:
                yield batch


def _notice(row: Row) -> Notice | None:
    try:
        return Notice.model_validate({"method": row["method"], "uri": row["uri"]})
    except ValidationError:
        return None  # a row this version does not know: skipped


def notice_channel(db: Database, origin: str) -> NoticeChannel:
    """The channel for this store: the only place that depends on the engine."""
    if db.dialect.name == "postgresql":
        from managed_tools.stores.notices.postgres import ListenedNotices

        return ListenedNotices(db, origin)
    return PolledNotices(db, origin)
