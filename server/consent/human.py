"""The human side of permission pauses, run from a terminal while servers keep running on the same data dir.

Each command opens the state file like any server process would (WAL, busy timeout), so it is safe next to
running servers, and prints for a person. Errors (HumanError) go to stderr with exit status 1.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from managed_tools.stores import approvals, sessions
from managed_tools.stores.approvals import ApprovalRecord
from managed_tools.stores.db import Database, Tx
from managed_tools.stores.errors import DatabaseOpenError, StoreError
from managed_tools.stores.sessions import Attendance
from managed_tools.tools.framework.context.what_runs import visible_lines

if TYPE_CHECKING:  # the catalogue loads only when a command needs it (server/cli/commands.py, ServedTools)
    from managed_tools.tools.framework.definitions.definition import ToolDefinition

BY = "cli"
# An id that starts with the given text, taken literally: `%`, `_` and `\` in it are no wildcards.
ID_STARTS = "id LIKE ? ESCAPE '\\'"


def like_prefix(given: str) -> str:
    """The LIKE pattern (with ID_STARTS' escape) for what starts with `given`."""
    return given.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class HumanError(Exception):
    """A command that cannot be carried out; the message is for the person at the terminal."""


class StateAt(Protocol):
    """Where the state is (a ServeConfig, or the approval commands' lighter server/config/state_place.py StatePlace)."""

    @property
    def data_dir(self) -> Path: ...
    @property
    def database(self) -> str | None: ...
    @property
    def state_path(self) -> Path: ...
    @property
    def state(self) -> Path | str: ...
    @property
    def busy_timeout_ms(self) -> int: ...


class Served(Protocol):
    """The tools served here, as far as the approval commands ask (a Registry, or one built only when asked)."""

    def hidden(self, name: str) -> bool: ...
    def get(self, name: str) -> ToolDefinition | None: ...


@asynccontextmanager
async def state_database(config: StateAt, *, create: bool = False) -> AsyncIterator[Database]:
    """The state database, as a server process opens it; `create` makes the SQLite file (a secret may be set before
    a first run)."""
    if create:
        config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    elif config.database is None and not config.state_path.exists():
        raise HumanError(f"No state database at {config.state_path}; has a server run with this data dir?")
    try:
        db = await Database.open(config.state, local_dir=config.data_dir, busy_timeout_ms=config.busy_timeout_ms)
    except DatabaseOpenError as exc:
        raise HumanError(str(exc)) from exc
    try:
        yield db
    finally:
        await db.close()


def moment(stamp: str) -> datetime:
    """A stored timestamp (stores.ids.utc_now's form) as a datetime."""
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def age(stamp: str) -> str:
    """How long ago a stored time was, as a person reads it: 42s, 5m, 3h, 2d."""
    try:
        then = moment(stamp)
    except ValueError:  # not one of ours (a row copied in by hand): shown as it is
        return stamp
    return span(int((datetime.now(UTC) - then).total_seconds()))


def span(seconds: int) -> str:
    """A duration as a person reads it at a glance: 3d, 5h, 12m, 40s."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _view(record: ApprovalRecord, attended: Attendance | None, attached: bool) -> dict[str, Any]:
    return {
        "id": record.id,
        "kind": record.kind,
        "status": record.status,
        "tool": record.tool_name,
        "session": record.session_id,
        "requestedAt": record.requested_at,
        "age": age(record.requested_at),
        "clientAttached": attached,
        "lastActivityAt": attended.last_activity_at if attended else None,
        "arguments": record.arguments,
        "question": question(record),
    }


def client_attached(attended: Attendance | None, *, local: bool) -> bool:
    """Is a client attached to the session now: an open wake whose server process lives (on this machine, where an
    SQLite state's servers run; a PostgreSQL state's replicas run elsewhere, so an open wake is taken at its word)?
    A wake a killed server left open does not count."""
    if attended is None:
        return False
    return any(_alive(pid) for pid in attended.open_wake_pids) if local else bool(attended.open_wake_pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def question(record: ApprovalRecord) -> str:
    """What the person is asked, whole and made visible the same way the client showed it (a request from
    before questions were stored shows its arguments)."""
    if record.question:
        return record.question
    args = json.dumps(record.arguments, indent=2, ensure_ascii=False)
    return f"{record.tool_name} with these arguments:\n" + visible_lines(args)


def _indented(text: str) -> str:
    return "\n".join("  " + line for line in text.split("\n"))


async def pending(config: StateAt, served: Served, *, as_json: bool, show: Callable[[list[str]], None]) -> None:
    """The open requests, those a client is attached to (someone may be waiting on it now) first; then the ones
    whose client and server are gone, marked with when their session last did anything. `show` puts the list
    before the person (the terminal's wrapping and paging are the CLI's)."""
    async with state_database(config) as db, db.read() as tx:
        records = [r for r in await approvals.list_open(tx) if not served.hidden(r.tool_name)]
        attendance = await sessions.attendance(tx, {r.session_id for r in records})
    local = config.database is None
    attached = {r.id: client_attached(attendance.get(r.session_id), local=local) for r in records}
    records.sort(key=lambda r: not attached[r.id])  # stable: oldest first within each group
    if as_json:
        # ASCII-only: a bidi or zero-width character in the arguments shows as a \uXXXX escape, never raw.
        views = [_view(r, attendance.get(r.session_id), attached[r.id]) for r in records]
        print(json.dumps({"requests": views}, indent=2, ensure_ascii=True))
        return
    if not records:
        print("No permission requests are waiting.")
        return
    said = [f"{len(records)} request(s). Approve with `managed-tools approve ID`, refuse with `managed-tools deny ID`."]
    for r in records:
        waiting = "waits for a person" if r.status == "pending" else "approved, waits for the retry"
        what = "answer with `managed-tools respond ID --json ...`" if r.kind == "custom_tool" else waiting
        said.append(f"\n{r.id}  {r.tool_name}  ({what}, {age(r.requested_at)} old)\n  session {r.session_id}")
        if not attached[r.id]:
            seen = attendance.get(r.session_id)
            since = f" for {age(seen.last_activity_at)}" if seen else ""
            said.append(f"  no client attached (session idle{since}): its model sees the answer only if it comes back")
        said.append(_indented(question(r)))
    show(said)


async def decide(
    config: StateAt,
    served: Served,
    request_id: str,
    *,
    approve: bool,
    note: str | None,
    remember: approvals.Remember = "once",
) -> None:
    async with state_database(config) as db, db.write() as tx:
        record = await _get(tx, served, request_id)
        if record.kind == "custom_tool" and approve:
            raise HumanError(f"Request {request_id} asks for {record.tool_name}'s result: use `managed-tools respond`.")
        await _decide(tx, record, approved=approve, note=note, remember=remember)
    verdict = "Approved" if approve else "Denied"
    print(f"{verdict} {record.tool_name} (request {request_id}):\n{_indented(question(record))}")
    if approve and remember == "session":
        print("It runs when the model calls it again with the same arguments, and again unasked for the rest of "
              "that session (an interrupt ends that).")  # fmt: skip
    elif approve:
        print("It runs when the model calls it again with the same arguments.")


async def respond(config: StateAt, served: Served, request_id: str, answer: str) -> None:
    try:
        value = json.loads(answer)
    except json.JSONDecodeError as exc:
        raise HumanError(f"--json is not valid JSON: {exc.msg} at character {exc.pos}.") from exc
    if not isinstance(value, dict):
        raise HumanError("--json must be a JSON object.")
    async with state_database(config) as db, db.write() as tx:
        record = await _get(tx, served, request_id)
        if record.kind != "custom_tool":
            raise HumanError(f"Request {request_id} asks for approval, not a result: use approve or deny.")
        definition = served.get(record.tool_name)
        if definition is None:
            raise HumanError(f"{record.tool_name} is no longer declared in the configuration.")
        try:
            definition.output_model.model_validate(value)
        except ValidationError as exc:
            raise HumanError(f"That result does not match {record.tool_name}'s output schema: {exc}") from exc
        await _decide(tx, record, approved=True, note=None, response=value)
    print(f"Answered {record.tool_name} (request {request_id}). The model gets it when it calls again.")


async def interrupt(config: StateAt, session_id: str | None, *, note: str | None) -> None:
    async with state_database(config) as db, db.write() as tx:
        if session_id is None:
            waiting = sorted({r.session_id for r in await approvals.list_open(tx)})
            if not waiting:
                print("No session has open requests; nothing to interrupt.")
                return
            if len(waiting) > 1:
                raise HumanError("Several sessions have open requests; name one with --session: " + ", ".join(waiting))
            session_id = waiting[0]
        try:
            await sessions.get_session(tx, session_id)
        except StoreError as exc:
            raise HumanError(str(exc)) from exc
        cleared = await approvals.interrupt(tx, session_id, by=BY, note=note)
    print(f"Interrupted session {session_id}: {cleared} open request(s) cleared; the session is idle.")


async def _get(tx: Tx, served: Served, request_id: str) -> ApprovalRecord:
    """The request (named by its id or a prefix only it has, as the tables print ids), unless it is for a tool
    this server does not serve: then it does not exist here either."""
    starts = (like_prefix(request_id),)
    rows = await tx.fetchall(f"SELECT id FROM approvals WHERE {ID_STARTS} ORDER BY id LIMIT 2", starts)
    if len(rows) == 1:
        request_id = str(rows[0]["id"])
    elif len(rows) > 1 and not any(row["id"] == request_id for row in rows):
        raise HumanError(f"{request_id!r} is the start of more than one request's id; give more of it.")
    try:
        record = await approvals.get(tx, request_id)
    except StoreError as exc:
        raise HumanError(str(exc)) from exc
    if served.hidden(record.tool_name):
        raise HumanError(f"No permission request {request_id} exists.")  # as stores/approvals.get says
    return record


async def _decide(
    tx: Tx,
    record: ApprovalRecord,
    *,
    approved: bool,
    note: str | None,
    response: dict[str, Any] | None = None,
    remember: approvals.Remember = "once",
) -> None:
    try:
        await approvals.decide(tx, record.id, approved=approved, by=BY, note=note, response=response, remember=remember)
    except StoreError as exc:
        raise HumanError(str(exc)) from exc
