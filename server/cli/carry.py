"""`managed-tools memory export` and `memory import`: a person carrying memory between states, or bringing it in
from another memory server (server/cli/foreign_memory.py), at a terminal. Never a model's tool: a bundle holds every
agent's memory, and an import writes shared memory without the gate a model's write passes.

The bundle's format, checks and transaction are stores/bundle.py's; here are the file, the progress and summary on
stderr, `--dry-run`, and the secret scanner's word on what goes out (docs/decisions/memory-bundle.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from managed_tools.server import __version__
from managed_tools.server.cli.carrying import Ticker, open_source, tell, warn_secrets, write_all
from managed_tools.server.config.state_place import StatePlace
from managed_tools.server.consent.human import HumanError, state_database
from managed_tools.stores import bundle
from managed_tools.stores.db import Tx
from managed_tools.stores.errors import StoreError

FORMATS = ("bundle", "reference-memory", "basic-memory")


def run(args: argparse.Namespace) -> int:
    """`memory export` or `memory import FILE` (server/cli/commands.py sends them here)."""
    try:
        return _run(args)
    except StoreError as exc:  # a bundle refused, the state busy: the store's message is meant for a person
        raise HumanError(str(exc)) from exc


def _run(args: argparse.Namespace) -> int:
    action, *rest = args.words
    for flag, given in (("--session", args.session), ("--versions", args.versions), ("--diff", args.diff)):
        if given:
            raise HumanError(f"{flag} is for `memory show`, not `memory {action}`.")
    place = StatePlace.of(args)
    if action == "export":
        if rest or args.source != "bundle" or args.dry_run or args.agent:
            raise HumanError("memory export takes --out FILE (or -) and the state flags; it exports every agent.")
        return anyio.run(_export, place, args.out)
    if len(rest) != 1:
        raise HumanError("memory import takes one FILE (a bundle, or --from reference-memory FILE, basic-memory DIR).")
    source = Path(rest[0])
    if args.source == "bundle":
        if args.agent:
            raise HumanError("--agent is for --from reference-memory or basic-memory; a bundle names its agents.")
        return anyio.run(_import_bundle, place, source, args.dry_run)
    if args.out is not None:
        raise HumanError("--out is for memory export.")
    from managed_tools.server.cli import foreign_memory

    return anyio.run(foreign_memory.run, place, args.source, source, args.agent or "default", args.dry_run)


# ---- export ----------------------------------------------------------------------------------------------------


def _texts(record: bundle.Record) -> list[str]:
    if isinstance(record, (bundle.MemoryVersion, bundle.SubstrateVersion)):
        return [record.content]
    if isinstance(record, bundle.Learning):
        return [record.title, record.detail]
    return []


def _described(record: bundle.Record) -> str:
    if isinstance(record, bundle.MemoryVersion):
        return f"memory version {record.id} of {record.target} in {record.scope}"
    if isinstance(record, bundle.SubstrateVersion):
        return f"substrate version {record.id} of {record.target_path}"
    return f"{record.kind} {getattr(record, 'id', '')}".strip()


@contextmanager
def _output(out: str | None) -> Any:
    """stdout, or FILE written beside itself and renamed into place only when whole (mode 0600: it holds memory)."""
    if out in (None, "-"):
        yield sys.stdout.buffer, "the output"
        sys.stdout.flush()
        return
    target = Path(out)
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)  # 0600
    except OSError as exc:
        raise HumanError(f"cannot write {target}: {exc.strerror} ({target.parent}).") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle, str(target)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


async def _export(place: StatePlace, out: str | None) -> int:
    ticker = Ticker("exported")
    kinds: dict[str, int] = {}
    flagged = written = 0
    async with state_database(place) as db, db.read() as tx:
        with _output(out) as (handle, name):
            number = 0
            async for record in bundle.export(tx, f"managed-tools {__version__}"):
                number += 1
                handle.write(line := bundle.line_of(record))
                written += len(line)
                kinds[record.kind] = kinds.get(record.kind, 0) + 1
                where = f"bundle line {number} ({_described(record)})"
                flagged += bool(warn_secrets(_texts(record), where, f"it is exported as it is: keep {name} private."))
                ticker(number)
    counts = bundle.Counts(
        sessions=kinds.get("session", 0),
        memory_versions=kinds.get("memory_version", 0),
        stores=kinds.get("memory_head", 0),
        learnings=kinds.get("learning", 0),
        substrate_versions=kinds.get("substrate_version", 0),
    )
    warned = f"; {flagged} records hold what looks like a credential (above)" if flagged else ""
    tell(f"exported {counts.said()} to {name} ({number} lines, {written:,} bytes){warned}.")
    return 0


# ---- import ----------------------------------------------------------------------------------------------------


async def _import_bundle(place: StatePlace, path: Path, dry_run: bool) -> int:
    with open_source(path) as handle:
        checked = bundle.read(handle, str(path))
    for number, record in checked.records:
        warn_secrets(_texts(record), f"{path} line {number} ({_described(record)})", "it is imported as it is.")

    async def work(tx: Tx) -> bundle.Counts:
        return await bundle.apply(tx, checked, Ticker("imported"))

    counts: bundle.Counts = await write_all(place, work, dry_run=dry_run)
    print(f"{'would import' if dry_run else 'imported'} {counts.said()} from {path}.")
    return 0
