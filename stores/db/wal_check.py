"""At start-up, what SQLite's recovery of the write-ahead log kept and what it dropped, said in the log.

A WAL frame whose checksum does not verify ends SQLite's recovery: that frame and every one after it are ignored,
acknowledged commits included, and SQLite says nothing (it is designed to, for a torn last write). So before the
first connection opens the file, `read_wal` counts the frames of the WAL's current generation (those carrying the
header's salts) and which of them end a transaction; after the open, a passive checkpoint answers how many frames
SQLite accepted. The difference is what a damaged WAL cost, in transactions. Reading the frame headers is one seek
and 24 bytes per frame, a few milliseconds for a full WAL (SQLite checkpoints it at about 4 MB).

When a WAL was left behind (the last server stopped without its final checkpoint, or another one runs), a
`PRAGMA quick_check` follows, bounded in time (QUICK_CHECK_SECONDS): a file damaged elsewhere is said at start-up,
not at the first call that reads the damaged page.
"""

from __future__ import annotations

import logging
import sqlite3
import struct
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("managed_tools.db")

MAGIC = (0x377F0682, 0x377F0683)
HEADER = 32
FRAME_HEADER = 24
QUICK_CHECK_SECONDS = 2.0
SHOWN_PROBLEMS = 5
RECHECKS = 3
RECHECK_SECONDS = 0.05


@dataclass(frozen=True)
class WalFrames:
    """The WAL's current generation as found on disk: its salts, and for each frame whether it ends a commit."""

    salts: bytes  # empty when the header is not one SQLite can read: it ignores the whole file
    commits: tuple[bool, ...]
    size: int

    @property
    def frames(self) -> int:
        return len(self.commits)


def read_wal(database: Path) -> WalFrames | None:
    """The frames of `database`'s WAL (None without one); a WAL whose header SQLite cannot read counts as
    frames SQLite will drop, all of them."""
    path = database.with_name(database.name + "-wal")
    try:
        with path.open("rb") as wal:
            header = wal.read(HEADER)
            if len(header) < HEADER:
                return None
            magic, _version, page_size = struct.unpack(">III", header[:12])
            size = path.stat().st_size
            if magic not in MAGIC or not 512 <= page_size <= 65536 or page_size & (page_size - 1):
                return WalFrames(b"", (), size)
            salts, commits = header[16:24], []
            while len(frame := wal.read(FRAME_HEADER)) == FRAME_HEADER and frame[8:16] == salts:
                commits.append(struct.unpack(">I", frame[4:8])[0] != 0)  # the database size, set on a commit
                wal.seek(page_size, 1)
            return WalFrames(salts, tuple(commits), size)
    except FileNotFoundError:
        return None


def report_recovery(conn: sqlite3.Connection, database: Path, before: WalFrames | None) -> None:
    """Log what SQLite recovered from the WAL found before the open (`before`), then a bounded quick check."""
    if before is None:
        return
    if not before.salts:
        log.error(
            "the state database's write-ahead log %s-wal has a header SQLite cannot read, so it ignored the log's "
            "%d bytes: the last writes before the server stopped are lost",
            database,
            before.size,
        )
        quick_check(conn, database)
        return
    if before.frames == 0:
        return
    accepted = _accepted(conn, database, before)
    kept = sum(before.commits[:accepted])
    lost = sum(before.commits[accepted:])
    if accepted < before.frames:
        log.error(
            "the state database's write-ahead log %s-wal was damaged: SQLite kept %d committed transaction(s) and "
            "dropped %d frame(s) after the damage, %d committed transaction(s) among them (the last writes before "
            "the server stopped); what they wrote is lost",
            database,
            kept,
            before.frames - accepted,
            lost,
        )
    else:
        log.info("recovered %d committed transaction(s) from the state database's write-ahead log, all of it", kept)
    quick_check(conn, database)


def _accepted(conn: sqlite3.Connection, database: Path, before: WalFrames) -> int:
    """How many of the frames found before the open SQLite accepted. Another process writing at the same time (a
    worker of the same server, a replica) may have written a transaction's frames, its commit among them, before
    it published them in the WAL index: they look dropped for a moment, so a shortfall is asked again before it
    is believed."""
    accepted = 0
    for attempt in range(RECHECKS + 1):
        if attempt:
            time.sleep(RECHECK_SECONDS)
        rows = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        accepted = max(0, int(rows[0][1])) if rows else 0
        after = read_wal(database)
        if after is None or after.salts != before.salts:
            return before.frames  # another process reset the WAL meanwhile, so it had read it whole
        if accepted >= before.frames:
            break
    return accepted


def quick_check(conn: sqlite3.Connection, database: Path, seconds: float = QUICK_CHECK_SECONDS) -> bool:
    """`PRAGMA quick_check`, interrupted after `seconds` (a large file is checked in part, and the log says so).
    False when it found damage."""
    deadline = time.monotonic() + seconds
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
    try:
        rows = [str(row[0]) for row in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.OperationalError as exc:
        if "interrupt" not in str(exc).lower():
            raise
        log.warning("the state database %s was not fully checked: its quick check ran past %g s", database, seconds)
        return True
    finally:
        conn.set_progress_handler(None, 0)
    if rows == ["ok"]:
        return True
    log.error(
        "the state database %s failed its quick check (%s); move it aside and restart to begin afresh, or "
        "recover it with the sqlite3 shell's .recover",
        database,
        "; ".join(rows[:SHOWN_PROBLEMS]) + (f"; and {len(rows) - SHOWN_PROBLEMS} more" if len(rows) > 5 else ""),
    )
    return False
