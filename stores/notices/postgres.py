"""Change notices on PostgreSQL: NOTIFY to publish, a LISTEN connection for arrivals (no table, no polling).

Every process holds one connection of its own beside the pools: it LISTENs on one channel and publishes there with
`pg_notify`, outside the write lock, so a notice never queues behind another replica's write. PostgreSQL delivers a
notification to every listener once its transaction commits, in commit order. If the connection drops (a restart,
a failover), the server keeps serving: the channel logs it once and connects again with backoff; the notices sent
meanwhile are lost, which costs a subscriber one refresh, never state (stores/notices/__init__.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence

import anyio
import asyncpg
from pydantic import ValidationError

from managed_tools.stores.db import Database
from managed_tools.stores.db.postgres import PostgresDatabase
from managed_tools.stores.notices import MAX_URI_CHARS, Notice

CHANNEL = "managed_tools_notices"
BACKOFF_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)
CHECK_SECONDS = 1.0  # how often an idle listener checks that its connection is still up
MAX_WAITING = 1_000  # arrivals not yet taken; more are dropped (hints)

log = logging.getLogger("managed_tools.notices")

# What a dropped or unreachable server raises.
_DOWN = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError)


class ListenedNotices:
    def __init__(self, db: Database, origin: str) -> None:
        if not isinstance(db, PostgresDatabase):
            raise TypeError("LISTEN/NOTIFY needs a PostgreSQL store")
        self._db = db
        self._origin = origin
        self._conn: asyncpg.Connection | None = None
        self._connecting = anyio.Lock()
        self._send, self._received = anyio.create_memory_object_stream[Notice](MAX_WAITING)
        self._down_logged = False

    async def publish(self, notices: Sequence[Notice]) -> None:
        payloads = [
            json.dumps({"origin": self._origin, "method": n.method, "uri": n.uri})
            for n in notices
            if n.uri is None or len(n.uri) <= MAX_URI_CHARS  # well under NOTIFY's 8000-byte payload limit
        ]
        if not payloads:
            return
        try:
            conn = await self._connection()
            await conn.execute("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", CHANNEL, payloads)
        except _DOWN as exc:
            self._lost(exc)  # a hint lost: subscribers see the change on their next read

    async def arrivals(self) -> AsyncIterator[list[Notice]]:
        attempt = 0
        try:
            while True:
                try:
                    conn = await self._connection()
                except _DOWN as exc:
                    self._lost(exc)
                    await anyio.sleep(BACKOFF_SECONDS[min(attempt, len(BACKOFF_SECONDS) - 1)])
                    attempt += 1
                    continue
                attempt = 0
                batch: list[Notice] = []
                with anyio.move_on_after(CHECK_SECONDS):  # never around the yield: the caller's work is not timed
                    batch.append(await self._received.receive())
                if not batch:
                    if conn.is_closed():
                        self._lost(ConnectionError("the listening connection closed"))
                    continue
                while len(batch) < MAX_WAITING:
                    try:
                        batch.append(self._received.receive_nowait())
                    except anyio.WouldBlock:
                        break
                yield batch
        finally:
            if self._conn is not None:
                self._conn.terminate()  # synchronous: safe while being cancelled
                self._conn = None

    async def _connection(self) -> asyncpg.Connection:
        """The listening connection, connected (and LISTENing) again if it dropped."""
        async with self._connecting:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            if self._conn is not None:
                self._conn.terminate()
                self._conn = None
            conn = await self._db.dedicated_connection()
            try:
                await conn.add_listener(CHANNEL, self._heard)
            except BaseException:
                conn.terminate()
                raise
            self._conn = conn
            if self._down_logged:
                log.warning("change notices from other replicas resumed (LISTEN reconnected)")
                self._down_logged = False
            return conn

    def _heard(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            fields = json.loads(payload)
            if fields.get("origin") == self._origin:
                return  # this process's own notice: its subscribers heard it already
            notice = Notice.model_validate({"method": fields.get("method"), "uri": fields.get("uri")})
        except (ValueError, AttributeError, ValidationError):
            return  # a payload this version does not know: skipped
        try:
            self._send.send_nowait(notice)
        except anyio.WouldBlock:
            log.debug("change notice dropped: the relay is behind")

    def _lost(self, exc: BaseException) -> None:
        if not self._down_logged:
            log.warning("change notices from other replicas paused; reconnecting (%s)", type(exc).__name__)
            self._down_logged = True
        if self._conn is not None and self._conn.is_closed():
            self._conn = None
