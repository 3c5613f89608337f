"""Durable shell state and command history (migration 5; reference §7 "Durable shell state").

The live processes belong to one server process; these rows are what outlives it: the session's shell cwd and
env, the persistent shell's last known metadata, and every command with its bounded output. Env values are kept
here so a restarted shell gets them back, but the tools only ever show their keys.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any, Literal

from pydantic import BaseModel

from managed_tools.stores.db import Tx
from managed_tools.stores.ids import canonical_json, sha256_hex, utc_now

CommandKind = Literal["bash", "shell", "persistent-shell"]
CommandStatus = Literal["running", "completed", "timed_out", "killed", "lost"]
DEFAULT_CWD = "/workspace"
KEEP_COMMANDS = 200  # per session; older rows are dropped so history stays bounded


class ShellState(BaseModel):
    cwd: str = DEFAULT_CWD
    env: dict[str, str] = {}
    shell: dict[str, Any] | None = None
    updated_at: str | None = None


class CommandRecord(BaseModel):
    id: str
    session_id: str
    kind: CommandKind
    command: str
    args: list[str]
    cwd: str
    status: CommandStatus
    exit_code: int | None
    duration_ms: float | None
    started_at: str
    updated_at: str
    stdout: str
    stderr: str
    truncated: bool
    owner_pid: int


def command_id(command: str, args: list[str], cwd: str, updated_at: str) -> str:
    """The reference's id: the first 16 hex of sha256 of JSON {command, args, cwd, updatedAt}."""
    return sha256_hex(canonical_json({"command": command, "args": args, "cwd": cwd, "updatedAt": updated_at}))[:16]


def shell_id(session_id: str, started_at: str, cwd: str) -> str:
    return sha256_hex(f"{session_id}:{started_at}:{cwd}")[:16]


async def get_state(tx: Tx, session_id: str) -> ShellState:
    row = await tx.fetchone("SELECT cwd, env, shell, updated_at FROM shell_states WHERE session_id = ?", (session_id,))
    if row is None:
        return ShellState()
    return ShellState(
        cwd=row["cwd"],
        env=json.loads(row["env"]),
        shell=None if row["shell"] is None else json.loads(row["shell"]),
        updated_at=row["updated_at"],
    )


async def put_state(tx: Tx, session_id: str, state: ShellState) -> ShellState:
    now = utc_now()
    await tx.execute(
        "INSERT INTO shell_states (session_id, cwd, env, shell, updated_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET cwd = excluded.cwd, env = excluded.env, shell = excluded.shell, "
        "updated_at = excluded.updated_at",
        (
            session_id,
            state.cwd,
            json.dumps(dict(sorted(state.env.items()))),
            None if state.shell is None else json.dumps(state.shell),
            now,
        ),
    )
    return state.model_copy(update={"updated_at": now})


async def start_command(
    tx: Tx, session_id: str, kind: CommandKind, command: str, *, args: list[str], cwd: str, started_at: str
) -> str:
    cid = command_id(command, args, cwd, started_at)
    await tx.execute(
        "INSERT INTO shell_commands (id, session_id, kind, command, args, cwd, status, started_at, updated_at, "
        "owner_pid) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
        (cid, session_id, kind, command, json.dumps(args), cwd, started_at, started_at, os.getpid()),
    )
    await tx.execute(
        "DELETE FROM shell_commands WHERE session_id = ? AND seq <= "
        "(SELECT seq FROM shell_commands WHERE session_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
        (session_id, session_id, KEEP_COMMANDS),
    )
    return cid


async def finish_command(
    tx: Tx,
    session_id: str,
    cid: str,
    *,
    status: CommandStatus,
    exit_code: int | None,
    duration_ms: float,
    stdout: str,
    stderr: str,
    truncated: bool,
) -> None:
    await tx.execute(
        "UPDATE shell_commands SET status = ?, exit_code = ?, duration_ms = ?, stdout = ?, stderr = ?, "
        "truncated = ?, updated_at = ? WHERE session_id = ? AND id = ?",
        (status, exit_code, duration_ms, stdout, stderr, int(truncated), utc_now(), session_id, cid),
    )


def _record(row: sqlite3.Row) -> CommandRecord:
    return CommandRecord(
        id=row["id"],
        session_id=row["session_id"],
        kind=row["kind"],
        command=row["command"],
        args=json.loads(row["args"]),
        cwd=row["cwd"],
        status=row["status"],
        exit_code=row["exit_code"],
        duration_ms=row["duration_ms"],
        started_at=row["started_at"],
        updated_at=row["updated_at"],
        stdout=row["stdout"],
        stderr=row["stderr"],
        truncated=bool(row["truncated"]),
        owner_pid=row["owner_pid"],
    )


async def get_command(tx: Tx, session_id: str, cid: str) -> CommandRecord | None:
    row = await tx.fetchone("SELECT * FROM shell_commands WHERE session_id = ? AND id = ?", (session_id, cid))
    return None if row is None else _record(row)


async def recent_commands(tx: Tx, session_id: str, limit: int) -> list[CommandRecord]:
    """Newest first."""
    rows = await tx.fetchall(
        "SELECT * FROM shell_commands WHERE session_id = ? ORDER BY seq DESC LIMIT ?", (session_id, limit)
    )
    return [_record(r) for r in rows]


async def recent_commands_of(tx: Tx, session_ids: list[str], per_session: int) -> dict[str, list[CommandRecord]]:
    """The newest `per_session` commands of each session, newest first."""
    if not session_ids:
        return {}
    marks = ",".join("?" * len(session_ids))
    rows = await tx.fetchall(
        f"SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY session_id ORDER BY seq DESC) AS nth "
        f"FROM shell_commands WHERE session_id IN ({marks})) WHERE nth <= ? ORDER BY session_id, seq DESC",
        [*session_ids, per_session],
    )
    found: dict[str, list[CommandRecord]] = {}
    for row in rows:
        found.setdefault(row["session_id"], []).append(_record(row))
    return found


async def states_of(tx: Tx, session_ids: list[str]) -> dict[str, ShellState]:
    if not session_ids:
        return {}
    marks = ",".join("?" * len(session_ids))
    rows = await tx.fetchall(
        f"SELECT session_id, cwd, env, updated_at FROM shell_states WHERE session_id IN ({marks})", session_ids
    )
    return {
        r["session_id"]: ShellState(cwd=r["cwd"], env=json.loads(r["env"]), updated_at=r["updated_at"]) for r in rows
    }
