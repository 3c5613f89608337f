"""Which image a byte string is (PNG, JPEG, GIF, WebP) and its size in pixels, read from the header alone.

A few dozen lines of `struct` instead of an imaging library: nothing is decoded, so a hostile file cannot reach
a decoder's bugs, and a header that does not parse is refused rather than guessed at.
"""

from __future__ import annotations

import struct

PNG, JPEG, GIF, WEBP = "image/png", "image/jpeg", "image/gif", "image/webp"
IMAGE_TYPES = (PNG, JPEG, GIF, WEBP)
_MAGIC = {b"\x89PNG\r\n\x1a\n": PNG, b"\xff\xd8\xff": JPEG, b"GIF87a": GIF, b"GIF89a": GIF}
# JPEG start-of-frame markers (every SOFn but DHT C4, JPG C8 and DAC CC) carry the height and width.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM and RSTn have no length
MAX_SIDE = 1 << 24  # WebP's own limit; a larger side is a header that lies


def sniff(head: bytes) -> str | None:
    """The image type the first bytes announce, or None."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP
    return next((mime for magic, mime in _MAGIC.items() if head.startswith(magic)), None)


def dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG, JPEG, GIF or WebP image, or None when its header does not say (or lies)."""
    try:
        size = _READERS[sniff(data) or ""](data)
    except (KeyError, struct.error, IndexError):
        return None
    if size is None or not all(0 < side <= MAX_SIDE for side in size):
        return None
    return size


def _png(data: bytes) -> tuple[int, int] | None:
    if data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _gif(data: bytes) -> tuple[int, int]:
    width, height = struct.unpack("<HH", data[6:10])
    return width, height


def _jpeg(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _STANDALONE:
            at += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, or the scan began before any frame header
            return None
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if length < 2:
            return None
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


_READERS = {PNG: _png, GIF: _gif, JPEG: _jpeg, WEBP: _webp}
