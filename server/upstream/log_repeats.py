"""Repeated log lines, rate-limited with a count: an upstream that writes garbage or floods its stderr cannot
flood our log (one wrote 7,309 warnings in 80 s).

A line's shape is its format string and its first argument (for the upstream loggers: which upstream), so the
varying text of a stderr line or a garbage line does not make each one new. Each shape has a token bucket:
`burst` lines at once, refilled at `burst` per `interval` seconds; a line over that is dropped and counted, and
the next line of that shape to pass says how many were dropped. At most `max_shapes` shapes are tracked (the
least recently seen is forgotten), so memory stays bounded whatever an upstream writes.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

BURST = 5
INTERVAL_SECONDS = 10.0
MAX_SHAPES = 256
MAX_KEY_CHARS = 200


@dataclass
class _Bucket:
    tokens: float
    at: float
    dropped: int = 0


class RepeatFilter(logging.Filter):
    """At most `burst` lines of one shape per `interval` seconds, then one "... repeated K more times"."""

    def __init__(
        self,
        burst: int = BURST,
        interval: float = INTERVAL_SECONDS,
        max_shapes: int = MAX_SHAPES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._burst = burst
        self._rate = burst / interval
        self._max_shapes = max_shapes
        self._clock = clock
        self._buckets: OrderedDict[tuple[str, str, str], _Bucket] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        key = (record.name, str(record.msg)[:MAX_KEY_CHARS], str(args[0])[:MAX_KEY_CHARS] if args else "")
        now = self._clock()
        bucket = self._buckets.pop(key, None) or _Bucket(float(self._burst), now)
        self._buckets[key] = bucket  # the most recently seen last; the least recently seen goes first
        while len(self._buckets) > self._max_shapes:
            self._buckets.popitem(last=False)
        bucket.tokens = min(float(self._burst), bucket.tokens + (now - bucket.at) * self._rate)
        bucket.at = now
        if bucket.tokens < 1:
            bucket.dropped += 1
            return False
        bucket.tokens -= 1
        if bucket.dropped:
            record.msg = f"{record.msg} (... repeated {bucket.dropped} more times)"
            bucket.dropped = 0
        return True


def limited(name: str) -> logging.Logger:
    """The logger `name`, with one RepeatFilter on it (however often this is called)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
    return logger
