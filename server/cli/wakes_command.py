"""`managed-tools wakes`: the wakes sessions have scheduled, read from the state like the approval commands (stores
only: no SDK, no catalogue), for a person at a terminal or a script (`--json`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from managed_tools.server.cli.terminal import Screen
from managed_tools.server.consent.human import StateAt, moment, span, state_database
from managed_tools.stores import wake_requests
from managed_tools.stores.wake_requests import WakeRequest, WakeStatus

LIVE: tuple[WakeStatus, ...] = ("queued", "running", "due")
EVERY: tuple[WakeStatus, ...] = ("queued", "running", "due", "offered", "fired", "failed", "cancelled")
LIMIT = 200


def _when(due_at: str, now: datetime) -> str:
    seconds = int((moment(due_at) - now).total_seconds())
    return f"in {span(seconds)}" if seconds >= 0 else f"{span(-seconds)} ago"


def _view(record: WakeRequest, owner: str) -> dict[str, object]:
    return {
        "id": record.id,
        "session": record.session_id,
        "owner": owner,
        "status": record.status,
        "priority": record.priority,
        "dueAt": record.due_at,
        "reason": record.reason,
        "offeredTo": record.offered_to,
        "result": record.result,
    }


async def wakes(config: StateAt, *, agent: str, include_done: bool, as_json: bool) -> None:
    async with state_database(config) as db, db.read() as tx:
        found = await wake_requests.list_agent(tx, agent, statuses=EVERY if include_done else LIVE, limit=LIMIT)
    if as_json:
        # ASCII-only, as `pending --json`: a control or bidi character in a reason shows escaped, never raw.
        print(json.dumps({"wakes": [_view(r, owner) for r, owner in found]}, indent=2, ensure_ascii=True))
        return
    if not found:
        print("No scheduled wakes." if include_done else "No wakes are waiting (--all shows those already handled).")
        return
    now = datetime.now(UTC)
    said = [f"{len(found)} wake(s), soonest first."]
    for record, _ in found:
        due = f"due {record.due_at} ({_when(record.due_at, now)})"
        said.append(f"\n{record.id}  {record.status}  {due}, {record.priority}")
        said.append(f"  session {record.session_id}")
        said.append(f"  {json.dumps(record.reason, ensure_ascii=True)[1:-1]}")
        if record.result:
            said.append(f"  result: {json.dumps(record.result[:200], ensure_ascii=True)[1:-1]}")
    Screen.now().show_lines(said)
