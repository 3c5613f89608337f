"""What `memory export` and both kinds of `memory import` share (server/cli/carry.py, server/cli/foreign_memory.py):
progress and warnings on stderr, the source file opened with one clear error, and the one transaction an import
writes in, rolled back whole on a dry run or any failure."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from managed_tools.server.config.state_place import StatePlace
from managed_tools.server.consent.human import HumanError, state_database
from managed_tools.stores.db import Tx
from managed_tools.tools.framework.wire import secret_scan

PROGRESS_SECONDS = 2.0


class Ticker:
    """Progress on stderr, at most every PROGRESS_SECONDS, so a long run says it is alive and a short one is quiet."""

    def __init__(self, verb: str) -> None:
        self.verb, self._last = verb, time.monotonic()

    def __call__(self, done: int, total: int | None = None) -> None:
        now = time.monotonic()
        if now - self._last >= PROGRESS_SECONDS:
            self._last = now
            tell(f"{self.verb} {done:,}" + ("" if total is None else f" of {total:,}") + " records…")


def tell(line: str) -> None:
    print(f"managed-tools: {line}", file=sys.stderr, flush=True)


def warn_secrets(texts: Iterable[str], where: str, then: str) -> list[secret_scan.Hit]:
    """Say on stderr what kinds of credential the scanner finds in `texts` (never their values); returns the hits."""
    hits = secret_scan.find_in(list(texts))
    if hits:
        tell(f"warning: {where} holds what looks like {', '.join(secret_scan.kinds(hits))}; {then}")
    return hits


class DryRun(Exception):  # not a failure: how a dry run rolls its transaction back
    """Raised inside the import's transaction to roll everything back once it is known to succeed."""


async def write_all(place: StatePlace, work: Callable[[Tx], Any], *, dry_run: bool) -> Any:
    """Run `work` in one write transaction of the state (made if it does not exist yet): committed whole, or, on a
    dry run or any failure, rolled back whole."""
    async with state_database(place, create=True) as db:
        try:
            async with db.write() as tx:
                result = await work(tx)
                if dry_run:
                    raise DryRun
        except DryRun:
            pass
    return result


def open_source(path: Path) -> IO[bytes]:
    try:
        return path.open("rb")
    except OSError as exc:
        raise HumanError(f"cannot read {path}: {exc.strerror}.") from exc
