"""`managed-tools audit export`: the event log as JSON lines or CSV for an operator's SIEM.

Two redaction profiles, each an allow-list of fields (a field we add to events later stays out until it is named
here). `shape`, the default, tells what ran, for whom, how it ended and how long it took, with each argument's type
and size but never its value; `full` adds the recorded argument previews, errors and summaries. Either way the
values were already stripped of every resolved secret when they were recorded (tools/framework/wire/redaction.py), and
the export masks every credential the gate's secret scan finds (tools/framework/wire/secret_scan.py) on the way out.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import anyio

from managed_tools.server.cli.views import one_session
from managed_tools.server.config.state_place import StatePlace
from managed_tools.server.consent.human import HumanError, state_database
from managed_tools.stores.db import Database, as_dict
from managed_tools.tools.framework.wire import secret_scan
from managed_tools.tools.framework.wire.redaction import scrub

BATCH = 1000
# Payload fields safe in every profile: names, ids, digests, kinds, numbers. Never a value a caller supplied.
SHAPE_FIELDS = (
    "spanId", "spanKind", "toolName", "ownership", "permissionPolicy", "argsDigest", "argKeys", "result",
    "errorKind", "durationMs", "resultChars", "requestId", "kind", "channel", "decision", "status", "by",
    "remember", "why", "transport",
)  # fmt: skip
FULL_FIELDS = ("args", "error", "resultSummary", "note", "reason")
CSV_COLUMNS = ("seq", "time", "session", "agent", "owner", "wake", "type", "tool", "result", "errorKind",
               "durationMs", "argsShape", "summary", "details")  # fmt: skip
_SINCE = re.compile(r"(\d+)([smhd])")


def run(args: argparse.Namespace) -> int:
    since = _since(args.since)
    place = StatePlace.of(args)
    out: TextIO = sys.stdout if args.output is None else open(args.output, "w", encoding="utf-8", newline="")  # noqa: SIM115
    try:
        anyio.run(_export, place, args, since, out)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def _since(given: str | None) -> str | None:
    """--since as the store's UTC timestamp: `2026-11-01`, `2026-11-01T08:00:00Z`, or an age like 24h or 7d."""
    if given is None:
        return None
    if match := _SINCE.fullmatch(given):
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match[2]]
        then = datetime.now(UTC) - timedelta(**{unit: int(match[1])})
    else:
        try:
            then = datetime.fromisoformat(given.replace("Z", "+00:00"))
        except ValueError:
            raise HumanError(
                f"--since takes a date, a time (2026-11-01T08:00:00Z) or an age (24h, 7d); not {given!r}."
            ) from None
        then = then.replace(tzinfo=UTC) if then.tzinfo is None else then.astimezone(UTC)
    return then.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


async def _export(place: StatePlace, args: argparse.Namespace, since: str | None, out: TextIO) -> None:
    async with state_database(place) as db:
        session = None
        if args.session is not None:
            async with db.read() as tx:
                session = await one_session(tx, args.session)
        rows = _rows(db, session, since)
        if args.format == "csv":
            writer = csv.DictWriter(out, CSV_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            async for event in rows:
                writer.writerow(_csv_row(record(event, full=args.full)))
        else:
            async for event in rows:
                out.write(json.dumps(record(event, full=args.full), ensure_ascii=False) + "\n")


async def _rows(db: Database, session: str | None, since: str | None) -> AsyncIterator[dict[str, Any]]:
    """Every matching event oldest first, a batch per read so a large log is never held whole."""
    clauses, params = ["e.seq > ?"], []
    if session is not None:
        clauses.append("e.session_id = ?")
        params.append(session)
    if since is not None:
        clauses.append("e.created_at >= ?")
        params.append(since)
    sql = (
        "SELECT e.seq, e.id, e.session_id, e.wake_id, e.type, e.created_at, e.summary, e.payload, "
        "s.agent_id, s.owner FROM events e LEFT JOIN sessions s ON s.id = e.session_id "
        f"WHERE {' AND '.join(clauses)} ORDER BY e.seq LIMIT {BATCH}"
    )
    last = 0
    while True:
        async with db.read() as tx:
            batch = [as_dict(row) for row in await tx.fetchall(sql, [last, *params])]
        for row in batch:
            yield row
        if len(batch) < BATCH:
            return
        last = batch[-1]["seq"]


def record(event: dict[str, Any], *, full: bool) -> dict[str, Any]:
    """One exported event under the chosen profile."""
    payload = json.loads(event["payload"]) if isinstance(event["payload"], str) else event["payload"]
    payload = payload if isinstance(payload, dict) else {}
    fields = SHAPE_FIELDS + FULL_FIELDS if full else SHAPE_FIELDS
    details = {key: payload[key] for key in fields if key in payload}
    if "args" in payload:
        details["argsShape"] = shape(payload["args"])
    exported: dict[str, Any] = {
        "seq": event["seq"],
        "id": event["id"],
        "time": event["created_at"],
        "session": event["session_id"],
        "agent": event.get("agent_id"),
        "owner": event.get("owner"),
        "wake": event["wake_id"],
        "type": event["type"],
        "details": details,
    }
    if full:
        exported["summary"] = event["summary"]
    recorded = scrub(exported)
    cleaned: dict[str, Any] = secret_scan.mask(recorded, secret_scan.find_in(secret_scan.strings(recorded)))
    return cleaned


def shape(value: Any, depth: int = 0) -> Any:
    """A value's structure without its content: each string as its length, lists and objects to a bounded depth."""
    if isinstance(value, str):
        return f"string({len(value)})"
    if isinstance(value, bool) or value is None:
        return type(value).__name__ if value is not None else "null"
    if isinstance(value, int | float):
        return "number"
    if depth >= 3:
        return "array" if isinstance(value, list) else "object"
    if isinstance(value, list):
        return [shape(item, depth + 1) for item in value[:5]] + (["…"] if len(value) > 5 else [])
    if isinstance(value, dict):
        return {str(key): shape(item, depth + 1) for key, item in list(value.items())[:40]}
    return type(value).__name__


def _csv_row(exported: dict[str, Any]) -> dict[str, Any]:
    details = dict(exported["details"])
    row = {key: exported.get(key) for key in ("seq", "time", "session", "agent", "owner", "wake", "type", "summary")}
    row.update(
        tool=details.pop("toolName", None),
        result=details.pop("result", None),
        errorKind=details.pop("errorKind", None),
        durationMs=details.pop("durationMs", None),
        argsShape=json.dumps(details.pop("argsShape"), ensure_ascii=False) if "argsShape" in details else None,
        details=json.dumps(details, ensure_ascii=False, sort_keys=True) if details else None,
    )
    return row
