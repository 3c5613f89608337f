"""Change notifications across the server processes sharing one store (stores/notices/__init__.py is the channel).

Each serving process runs one relay beside its `Notifier`: what the process's own calls and watchers publish goes
out on the channel (batched, never on a call's path: the queue is bounded and a full one drops, as a lost hint
costs only a refresh), and what the others publish is delivered to this process's subscribers, in both eras.
So a client subscribed through one replica hears of a memory write made through another.
"""

from __future__ import annotations

import logging

import anyio
from mcp.shared.subscriptions import ServerEvent, event_from_wire, event_to_notification

from managed_tools.server.mcp.resources import Notifier
from managed_tools.stores.errors import StoreError
from managed_tools.stores.ids import uuid7
from managed_tools.stores.notices import Notice, NoticeChannel, notice_channel
from managed_tools.tools.framework.context.context import Runtime

log = logging.getLogger("managed_tools.relay")
MAX_QUEUED = 1_000
RETRY_SECONDS = 1.0


def to_notice(event: ServerEvent) -> Notice:
    wire = event_to_notification(event, {})
    return Notice.model_validate({"method": wire.method, "uri": getattr(wire.params, "uri", None)})


def to_event(notice: Notice) -> ServerEvent | None:
    return event_from_wire(notice.method, {"uri": notice.uri})


class Relay:
    def __init__(self, channel: NoticeChannel) -> None:
        self._channel = channel
        self._send, self._outbox = anyio.create_memory_object_stream[Notice](MAX_QUEUED)

    def send(self, event: ServerEvent) -> None:
        try:
            self._send.send_nowait(to_notice(event))
        except anyio.WouldBlock:
            log.debug("change notice dropped: the relay is behind")

    async def run(self, notifier: Notifier) -> None:
        """Relay until cancelled: the notifier forwards its events here meanwhile."""
        notifier.forward = self.send
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._publish)
                tasks.start_soon(self._deliver, notifier)
        finally:
            notifier.forward = None

    async def _publish(self) -> None:
        async for first in self._outbox:
            batch = [first]
            while len(batch) < MAX_QUEUED:
                try:
                    batch.append(self._outbox.receive_nowait())
                except anyio.WouldBlock:
                    break
            await self._channel.publish(list(dict.fromkeys(batch)))  # a burst of the same change is one notice

    async def _deliver(self, notifier: Notifier) -> None:
        while True:
            try:
                async for batch in self._channel.arrivals():
                    for notice in dict.fromkeys(batch):
                        if (event := to_event(notice)) is not None:
                            await notifier.deliver(event)
            except StoreError as exc:  # a locked or unreadable store: listen again shortly
                log.warning("change notices from other processes paused: %s", exc)
                await anyio.sleep(RETRY_SECONDS)


def relay_for(runtime: Runtime) -> Relay:
    """This process's relay on the runtime's store, under an origin of its own (its own notices are not echoed)."""
    return Relay(notice_channel(runtime.db, uuid7()))
