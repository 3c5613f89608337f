"""Ids and timestamps shared by every store (docs/architecture.md §7)."""

import hashlib
import json
import os
import time
from typing import Any


def uuid7() -> str:
    """A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then random bits; sortable by creation time.

    Python 3.11 has no `uuid.uuid7` (it arrives in 3.14), and this is the whole algorithm.
    """
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64 | 0b10 << 62 | rand & ((1 << 62) - 1)
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
