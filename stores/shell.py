"""Durable shell state and command history (migration 5; reference §7 "Durable shell state").

The live processes belong to one server process; these rows are what outlives it: the session's shell cwd and
env, the persistent shell's last known metadata, and every command with its bounded output. Env values are kept
here so a restarted shell gets them back, but the tools only ever show their keys.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from pydantic import BaseModel

from managed_tools.stores import search
from managed_tools.stores.db import Row, Tx
from managed_tools.stores.ids import canonical_json, sha256_hex, utc_now

CommandKind = Literal["bash", "shell", "persistent-shell"]
CommandStatus = Literal["running", "completed", "timed_out", "killed", "lost"]
DEFAULT_CWD = "/workspace"
KEEP_COMMANDS = 200  # per session; older rows are dropped so history stays bounded
SEARCHED_COMMANDS = 5  # the newest commands of a session that memory_search sees, as the reference's shell state


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
    await _index(tx, session_id)
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
    await _index(tx, session_id)


async def _index(tx: Tx, session_id: str) -> None:
    """The session's shell state as memory_search finds it (reference §3: cwd, env keys, the last commands with
    their output), rewritten when a command ends or the state changes; never an env value."""
    agent_id = await tx.scalar("SELECT agent_id FROM sessions WHERE id = ?", (session_id,))
    if agent_id is None:
        return
    state = await get_state(tx, session_id)
    lines = [f"cwd {state.cwd}", "env " + " ".join(sorted(state.env)) if state.env else ""]
    for record in await recent_commands(tx, session_id, SEARCHED_COMMANDS):
        if record.status != "running":
            lines += [f"$ {' '.join([record.command, *record.args])}", record.stdout, record.stderr]
    body = "\n".join(line for line in lines if line.strip())
    await search.upsert(
        tx, key=f"shell_state:{session_id}", source="shell_state", agent_id=str(agent_id), session_id=session_id,
        title="shell_state", body=body,
    )  # fmt: skip


def _record(row: Row) -> CommandRecord:
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
