"""What a killed server left half done, found from its records at the next start (never by walking a mount).

A wake whose process was killed is never closed. Its last calls that have a `span.started` and no `span.completed`
were running when it died; the `path` argument they were called with names the directory where a file write of
theirs may have left its temporary file (sandbox/files.py sweeps only its own there). Bounded: the most recent open
wakes, and the last events of each.
"""

from __future__ import annotations

import json

from managed_tools.stores.db import Tx

OPEN_WAKES = 20
LAST_EVENTS = 100


async def unfinished_call_paths(tx: Tx) -> list[str]:
    """The `path` arguments of the calls that started and never completed in the open wakes, as recorded."""
    wakes = await tx.fetchall(
        "SELECT id FROM wakes WHERE ended_at IS NULL ORDER BY started_at DESC LIMIT ?", (OPEN_WAKES,)
    )
    paths: list[str] = []
    for wake in wakes:
        rows = await tx.fetchall(
            "SELECT type, payload FROM events WHERE wake_id = ? AND type IN ('span.started', 'span.completed') "
            "ORDER BY seq DESC LIMIT ?",
            (wake["id"], LAST_EVENTS),
        )
        started: dict[str, str] = {}
        completed: set[str] = set()
        for row in rows:
            payload = json.loads(row["payload"])
            span = str(payload.get("spanId"))
            if row["type"] == "span.completed":
                completed.add(span)
            elif isinstance(path := (payload.get("args") or {}).get("path"), str):
                started[span] = path
        paths += [path for span, path in started.items() if span not in completed]
    return sorted(set(paths))
