"""What the start-up check of a left-behind write-ahead log costs (stores/db/wal_check.py), on a large state file.

It builds a state database of about --mb megabytes (migrated, rows of 400 bytes in an indexed table), then a crash
snapshot of it: the file plus a WAL of --wal-frames pages not yet checkpointed, copied while the writer is open, as a
killed server leaves them. Each round opens the snapshot with `Database.open` (which reads the WAL's frame headers,
lets SQLite recover, checkpoints passively and runs the bounded `PRAGMA quick_check`) and, as the baseline in the
same run, the same file after a clean stop (no WAL: no check runs). It prints median and p95 of each and their ratio.

    python bench/wal_check.py [--mb 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from managed_tools.stores.db import Database

ROW = 400


async def build(path: Path, mb: int) -> None:
    await (await Database.open(path)).close()
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE filler (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    conn.execute("CREATE INDEX filler_body ON filler (body)")
    rows = mb * 1_000_000 // (ROW * 2)  # the index holds each body again
    with conn:
        conn.executemany("INSERT INTO filler (body) VALUES (?)", (((f"{n:012d}" * 34)[:ROW],) for n in range(rows)))
    conn.close()


def crash_snapshot(clean: Path, into: Path, frames: int) -> None:
    """`clean` plus a WAL of about `frames` pages, copied while its writer is still open."""
    work = into.parent / "writing"
    work.mkdir()
    shutil.copy(clean, work / clean.name)
    conn = sqlite3.connect(work / clean.name)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    for n in range(frames // 4):
        with conn:
            conn.execute("UPDATE filler SET body = ? WHERE id = ?", (f"changed {n}" * 20, n * 97 + 1))
    into.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(work / (clean.name + suffix), into / (clean.name + suffix))
    conn.close()


async def timed_open(source: Path, scratch: Path) -> float:
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(source, scratch)
    started = time.perf_counter()
    db = await Database.open(scratch / "state.db")
    took = time.perf_counter() - started
    await db.close()
    return took


def line(name: str, times: list[float]) -> str:
    p95 = statistics.quantiles(times, n=20)[-1] if len(times) > 1 else times[0]
    return f"{name:<26} median {statistics.median(times) * 1000:8.1f} ms   p95 {p95 * 1000:8.1f} ms"


async def main(mb: int, rounds: int, frames: int) -> None:
    with tempfile.TemporaryDirectory(prefix="wal-check-") as tmp:
        root = Path(tmp)
        (root / "clean").mkdir()
        await build(root / "clean" / "state.db", mb)
        crash_snapshot(root / "clean" / "state.db", root / "crashed", frames)
        size = (root / "clean" / "state.db").stat().st_size / 1e6
        wal = (root / "crashed" / "state.db-wal").stat().st_size / 1e6
        print(f"state file {size:.0f} MB, left-behind WAL {wal:.1f} MB, {rounds} rounds")
        clean, crashed = [], []
        for _ in range(rounds):
            clean.append(await timed_open(root / "clean", root / "scratch"))
            crashed.append(await timed_open(root / "crashed", root / "scratch"))
        print(line("open after a clean stop", clean))
        print(line("open after a crash (check)", crashed))
        print(f"ratio (median) {statistics.median(crashed) / statistics.median(clean):.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wal-frames", type=int, default=1000)
    options = parser.parse_args()
    anyio.run(main, options.mb, options.rounds, options.wal_frames)
