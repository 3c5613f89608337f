"""SIGINT and SIGTERM stop the server the way a closed stdin does: the same cleanup, then exit 130 or 143.

The signals are received by the event loop (`anyio.open_signal_receiver`) for the server's whole life, start-up
and cleanup included, so no signal ever lands as a `KeyboardInterrupt` in the middle of closing the database.
The first one starts the transport's graceful stop; the cleanup that follows (commands' process groups killed
and recorded, wakes closed, the database closed) is bounded, so a second one is only acknowledged.
"""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
from anyio.abc import TaskGroup

log = logging.getLogger("managed_tools.stopping")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


Stop = Callable[[], Coroutine[Any, Any, None]]


class Stopping:
    """What a transport does when a signal asks the server to stop, and which signal that was."""

    def __init__(self, tasks: TaskGroup) -> None:
        self.signum: int | None = None
        self._tasks = tasks
        self._actions: list[Stop] = []

    def on_stop(self, action: Stop) -> None:
        """Start `action` when a signal arrives (at once if one already has: it came during start-up)."""
        if self.signum is not None:
            self._tasks.start_soon(action)
        else:
            self._actions.append(action)

    def signalled(self, signum: int) -> None:
        if self.signum is not None:
            log.warning("already stopping; %s ignored", signal.Signals(signum).name)
            return
        self.signum = signum
        log.info("%s: stopping", signal.Signals(signum).name)
        for action in self._actions:
            self._tasks.start_soon(action)

    @property
    def exit_code(self) -> int:
        """0 after a closed stdin, else 128 + the signal, as a shell reports a command a signal ended."""
        return 0 if self.signum is None else 128 + self.signum


async def until_signalled(serve: Callable[[Stopping], Awaitable[None]]) -> int:
    """Run `serve` (which registers its stop with `on_stop`) to its end; the process's exit code."""
    failure: Exception | None = None
    with anyio.open_signal_receiver(*SIGNALS) as signals:
        async with anyio.create_task_group() as watcher:
            stopping = Stopping(watcher)

            async def watch() -> None:
                async for signum in signals:
                    stopping.signalled(signum)

            watcher.start_soon(watch)
            try:
                await serve(stopping)
            except Exception as exc:  # raised as itself below, not wrapped in the watcher's exception group
                failure = exc
            watcher.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return stopping.exit_code


def exiting() -> None:
    """At the exit of a process that served (an `atexit` handler: never in the middle of a test run)."""
    for signum in SIGNALS:  # the exit is under way: a late signal would only add a KeyboardInterrupt traceback
        signal.signal(signum, signal.SIG_IGN)
    # Everything is closed by now, so the collector has nothing to free; yet its pass over the whole heap while
    # the interpreter finalizes took 1-2 s of every exit, a third of the time a stop may take.
    gc.freeze()
