"""Ids and timestamps shared by every store (docs/architecture.md §7)."""

import hashlib
import json
import os
import threading
import time
from typing import Any

_RANDOM_BITS = 74  # rand_a (12) and rand_b (62) of RFC 9562's layout
_last = [0, 0]  # the last id's milliseconds and random bits, in this process
_last_lock = threading.Lock()  # ids are made on the loop's thread and on the database thread


def uuid7() -> str:
    """A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then random bits; sortable by creation time, and strictly
    increasing within a process (RFC 9562 §6.2, method 3): an id made in the same millisecond as the one before
    (or after the clock stepped back) is that one plus a random step of up to 2^32, so the next id is not
    guessable from the last. Rows ordered by (created_at, id), such as two memory versions written in one
    millisecond, then keep the order they were made in.

    Python 3.11 has no `uuid.uuid7` (it arrives in 3.14), and this is the whole algorithm.
    """
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big") >> (80 - _RANDOM_BITS)
    with _last_lock:
        if ms <= _last[0]:
            ms, rand = _last[0], _last[1] + 1 + (rand & 0xFFFFFFFF)
            if rand >> _RANDOM_BITS:  # 2^74 ids in one millisecond: borrow the next one
                ms, rand = ms + 1, 0
        _last[:] = ms, rand
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0b10 << 62 | rand & ((1 << 62) - 1)
    # str(uuid.UUID(int=value)), spelled out: a call writes several ids, and the UUID object costs twice this.
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def utc_now() -> str:
    """UTC ISO-8601 with millisecond precision and a `Z` suffix (formatted by hand: strftime costs half again)."""
    ns = time.time_ns()
    t = time.gmtime(ns // 1_000_000_000)
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
        f".{ns // 1_000_000 % 1000:03d}Z"
    )


def canonical_json(value: Any) -> str:
    """Deterministic compact JSON: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()
