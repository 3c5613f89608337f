"""The secret scan's cost and its false positives, on this repository's own text.

Cost: every file of the repository (code, docs, lock files) scanned as one result would be, median and p95 per
MiB over several rounds, against a baseline measured in the same run: redaction.scrub of the known secrets (the
exact-value pass every result already takes). False positives: the hits in the server's own code and docs (no
credential lives there, so each is one), and in tests/ (whose fixtures are made-up secrets on purpose, so those
are mostly true hits), each with its kind.

Run: python bench/secret_scan.py [rounds]
"""

from __future__ import annotations

import collections
import statistics
import sys
import time
from pathlib import Path

from managed_tools.tools.framework.wire import redaction, secret_scan

REPO = Path(__file__).resolve().parent.parent
SUFFIXES = (".py", ".md", ".c", ".toml", ".json", ".yml", ".txt", ".sh", ".in")
SOURCE_DIRS = ("tools", "server", "stores", "sandbox", "docs", "bench")


def texts(dirs: tuple[str, ...]) -> list[tuple[Path, str]]:
    found = []
    for directory in dirs:
        for path in sorted((REPO / directory).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES:
                found.append((path, path.read_text(encoding="utf-8", errors="replace")))
    return found


def per_mib(seconds: list[float], size: int) -> tuple[float, float]:
    scale = 1000 * (1 << 20) / size
    ordered = sorted(seconds)
    return statistics.median(ordered) * scale, ordered[int(0.95 * (len(ordered) - 1))] * scale


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    corpus = texts((*SOURCE_DIRS, "tests"))
    size = sum(len(text) for _, text in corpus)
    secret_scan.find("warm the detectors up: password=x1y2z3w4")
    hidden = ["not-in-the-text-1", "not-in-the-text-2", "not-in-the-text-3"]
    scan, baseline = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        for _, text in corpus:
            secret_scan.find(text)
        scan.append(time.perf_counter() - started)
        started = time.perf_counter()
        for _, text in corpus:
            redaction.scrub(text, hidden)
        baseline.append(time.perf_counter() - started)
    scan_median, scan_p95 = per_mib(scan, size)
    base_median, base_p95 = per_mib(baseline, size)
    print(f"corpus: {len(corpus)} files, {size / (1 << 20):.2f} MiB; {rounds} rounds")
    print(f"secret scan : median {scan_median:8.1f} ms/MiB  p95 {scan_p95:8.1f} ms/MiB")
    print(f"exact scrub : median {base_median:8.1f} ms/MiB  p95 {base_p95:8.1f} ms/MiB  (baseline)")
    print(f"ratio       : {scan_median / base_median:.0f}x the exact-value scrub")
    parts = (("server's own code and docs", SOURCE_DIRS), ("tests/ (made-up secrets on purpose)", ("tests",)))
    for label, dirs in parts:
        kinds: collections.Counter[str] = collections.Counter()
        scanned = texts(dirs)
        for _, text in scanned:
            kinds.update(hit.kind for hit in secret_scan.find(text))
        lines = sum(text.count("\n") + 1 for _, text in scanned)
        print(f"hits in {label}: {sum(kinds.values())} in {lines} lines {dict(kinds)}")


if __name__ == "__main__":
    main()
