"""The crash suite's driver, shared by tests/stores/test_crash.py (a few kills) and bench/crash.py (a hundred).

A real `managed-tools serve` over stdio, spoken to by `mcp.Client`, runs a mixed workload (memory writes with
compare-and-swap, substrate promotions, a permission approved with the `managed-tools approve` CLI, shell commands)
until it is killed with SIGKILL at a random moment, process group and all. Every result the client saw succeed
goes into a ledger; after each restart, `check` holds the data dir to it: every SQLite file passes
`PRAGMA integrity_check`, every acknowledged write is there with its content, every granted approval is still
granted, and the substrate file agrees with the head of its version history (no pending write left to heal).

The same workload runs on PostgreSQL (`database`: the server's `--database` URL); the check then reads the rows
from there. A call refused with kind `state_unavailable` (PostgreSQL down for a moment) was not acknowledged, so
the workload notes nothing for it and goes on.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import asyncpg
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from managed_tools.server.publishing.publish import ERROR_META_KEY
from managed_tools.stores.shell import KEEP_COMMANDS

PROMOTE = "resources_promote_to_substrate"
TARGET = "SOUL.md"
# Runs the server with its pid written down first (exec keeps the pid; the SDK already gave it its own process
# group), so the driver can kill it as `kill -9 -PGID` would.
LAUNCH = (
    "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
    "os.execv(sys.executable, [sys.executable, '-m', 'managed_tools.server', 'serve', *sys.argv[2:]])"
)


class Unavailable(Exception):
    """A call refused because the state store could not be reached: not acknowledged, nothing to expect."""


class Rows(Protocol):
    """Where the check reads the acknowledged state: the engine's own rows for one parameterless query."""

    async def __call__(self, query: str) -> list[tuple[Any, ...]]: ...


@dataclass
class Ledger:
    """What the client saw acknowledged, across every run of the server."""

    session_id: str | None = None
    memory: dict[str, str] = field(default_factory=dict)  # version id -> content
    promotions: dict[str, str] = field(default_factory=dict)  # version id -> content hash
    approvals: set[str] = field(default_factory=set)  # request ids `managed-tools approve` confirmed
    commands: list[str] = field(default_factory=list)  # shell command ids that completed, in that order
    acknowledged: Counter[str] = field(default_factory=Counter)
    notes_left: int = 0  # kills that left a pending substrate write for start-up to settle


@dataclass
class Crashes:
    workspace: Path
    data_dir: Path
    rng: random.Random
    database: str | None = None  # a PostgreSQL URL; None: the data dir's SQLite state.db
    ledger: Ledger = field(default_factory=Ledger)
    unavailable: int = 0  # calls refused with state_unavailable (not acknowledged, not expected)

    @property
    def state_flags(self) -> list[str]:
        return ["--data-dir", str(self.data_dir)] + ([] if self.database is None else ["--database", self.database])

    @property
    def substrate(self) -> Path:
        return self.data_dir / "agents" / "default" / "substrate"

    @property
    def log(self) -> Path:
        """The servers' stderr, all runs."""
        return self.data_dir.parent / "server.log"

    @property
    def pending(self) -> Path:
        return self.data_dir / "substrate-pending"

    @asynccontextmanager
    async def server(self) -> AsyncIterator[tuple[Client, int]]:
        """A fresh server process (resuming the first run's session) and its pid."""
        pid_file = self.data_dir.parent / "server.pid"
        pid_file.unlink(missing_ok=True)
        args = ["-c", LAUNCH, str(pid_file), "--workspace", str(self.workspace), *self.state_flags]
        args += ["--allow", PROMOTE]
        if self.ledger.session_id is not None:
            args += ["--session", self.ledger.session_id]
        params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
        with self.log.open("a") as log:
            async with Client(stdio_client(params, errlog=log)) as client:
                if self.ledger.session_id is None:
                    snapshot = await client.call_tool("session_get_snapshot", {})
                    self.ledger.session_id = _data(snapshot)["sessionId"]
                yield client, int(pid_file.read_text())

    async def round(
        self, max_delay: float, outage: Callable[[], Awaitable[None]] | None = None
    ) -> tuple[float, list[str]]:
        """Start (healing what the last kill left), check, work until a SIGKILL at a random moment; returns how
        long start-up took and what the check found. With `outage` (a PostgreSQL restart), the work goes on
        through it, from a random moment, and for a random while after it before the kill."""
        started = time.perf_counter()
        killed = False
        problems: list[str] = []
        try:
            async with self.server() as (client, pid):
                startup = time.perf_counter() - started
                problems = await self.check()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._work, client)
                    if outage is not None:
                        await anyio.sleep(self.rng.uniform(0.0, max_delay))
                        await outage()
                    await anyio.sleep(self.rng.uniform(0.0, max_delay))
                    os.killpg(pid, signal.SIGKILL)
                    killed = True
                    tg.cancel_scope.cancel()
        except Exception:
            if not killed:  # a failure of the workload itself, not the transport breaking under the kill
                raise
        if any(self.pending.glob("*.json")):
            self.ledger.notes_left += 1
        return startup, problems

    async def last_check(self) -> list[str]:
        async with self.server():
            return await self.check()

    async def _work(self, client: Client) -> None:
        read = _data(await client.call_tool("memory_read", {"target": "working_buffer"}))
        head: str | None = read.get("versionId")
        step = 0
        approved = False  # one approval a round: each runs the `managed-tools approve` CLI, a whole process
        while True:
            step += 1
            kind = self.rng.choice(("memory", "memory", "promote", "shell") + (() if approved else ("approve",)))
            approved = approved or kind == "approve"
            try:
                if kind == "memory":
                    head = await self._memory(client, head, step)
                elif kind == "promote":
                    await self._promote(client, step)
                elif kind == "shell":
                    await self._shell(client)
                else:
                    await self._approve_and_run(client, step)
            except Unavailable:
                self.unavailable += 1
                await anyio.sleep(0.1)  # the server reconnects with backoff; no point in asking at once

    async def _memory(self, client: Client, head: str | None, step: int) -> str | None:
        content = f"write {step} {self.rng.random()}\n"  # as stored: one final newline
        args: dict[str, Any] = {"target": "working_buffer", "content": content}
        if head is not None:
            args["expectedVersionId"] = head
        version = str(_data(await client.call_tool("memory_write", args))["versionId"])
        self.ledger.memory[version] = content
        self.ledger.acknowledged["memory"] += 1
        return version

    async def _promote(self, client: Client, step: int) -> None:
        text = f"# Soul\nstep {step} {self.rng.random()}\n"
        (self.workspace / "draft.md").write_text(text)
        args = {"sourcePath": "draft.md", "targetPath": TARGET, "overwrite": True}
        promoted = _data(await client.call_tool(PROMOTE, args))
        self.ledger.promotions[promoted["versionId"]] = promoted["contentHash"]
        self.ledger.acknowledged["promotion"] += 1

    async def _shell(self, client: Client) -> None:
        ran = _data(await client.call_tool("bash", {"command": "ls", "args": ["-a"]}))
        if ran["status"] == "completed":
            self.ledger.commands.append(ran["commandId"])
            self.ledger.acknowledged["shell"] += 1

    async def _approve_and_run(self, client: Client, step: int) -> None:
        args = {"command": f"echo approved {step} {self.rng.randrange(10**9)}"}
        blocked = _reached(await client.call_tool("shell_run", args))
        request = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
        approve = [sys.executable, "-m", "managed_tools.server", "approve", request, *self.state_flags]
        with anyio.CancelScope(shield=True):  # a person's answer does not die with the server: it is its own process
            if (await anyio.run_process(approve, check=False)).returncode != 0:
                return
        self.ledger.approvals.add(request)
        self.ledger.acknowledged["approval"] += 1
        ran = _data(await client.call_tool("shell_run", args))
        if ran["status"] == "completed":
            self.ledger.commands.append(ran["commandId"])
            self.ledger.acknowledged["shell"] += 1

    async def check(self) -> list[str]:
        """What the state (the data dir's files and the engine's rows), now that a server started on it, does not
        keep of what was acknowledged."""
        problems = [
            f"{db.name}: integrity_check says {verdict}"
            for db in sorted(self.data_dir.rglob("*.db"))
            if (verdict := _integrity(db)) != "ok"
        ]
        rows: Rows = self._sqlite_rows if self.database is None else self._postgres_rows
        memory = dict(await rows("SELECT id, content FROM memory_versions"))
        versions = dict(await rows("SELECT id, content_hash FROM substrate_versions"))
        heads = await rows(  # TARGET is our constant: no parameter, so one query text serves both engines
            "SELECT content_hash FROM substrate_versions "
            f"WHERE target_path = '/workspace/agent/{TARGET}' ORDER BY seq DESC LIMIT 1"
        )
        head = heads[0] if heads else None
        granted = {r for (r,) in await rows("SELECT id FROM approvals WHERE status IN ('approved', 'consumed')")}
        commands = {c for (c,) in await rows("SELECT id FROM shell_commands WHERE status = 'completed'")}
        (kept,) = (await rows("SELECT count(*) FROM shell_commands"))[0]  # the workload's one session
        ledger = self.ledger
        problems += [f"memory version {v} lost or changed" for v, c in ledger.memory.items() if memory.get(v) != c]
        problems += [f"substrate version {v} lost" for v, h in ledger.promotions.items() if versions.get(v) != h]
        problems += [f"approval {a} no longer granted" for a in sorted(ledger.approvals - granted)]
        problems += [f"shell command {c} lost" for c in _lost_commands(ledger.commands, commands, kept)]
        file = self.substrate / TARGET
        on_disk = hashlib.sha256(file.read_bytes()).hexdigest() if file.exists() else None
        if on_disk != (None if head is None else head[0]):
            problems.append(f"{TARGET} on disk ({on_disk}) is not the head of its history ({head})")
        if self.pending.is_dir() and any(self.pending.iterdir()):
            problems.append("a pending substrate write was left after start-up")
        if strays := [f"{p.name} ({_age(p)})" for p in sorted(self.substrate.rglob(".*.tmp"))]:
            problems.append(f"temporary files left in the substrate: {strays}")
        return problems

    async def _sqlite_rows(self, query: str) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(f"file:{self.data_dir / 'state.db'}?mode=ro", uri=True)) as db:
            return db.execute(query).fetchall()

    async def _postgres_rows(self, query: str) -> list[tuple[Any, ...]]:
        connection = await asyncpg.connect(self.database)
        try:
            return [tuple(row.values()) for row in await connection.fetch(query)]
        finally:
            await connection.close()


def _lost_commands(acknowledged: list[str], completed: set[str], kept: int) -> list[str]:
    """The acknowledged commands that are gone, but for those retention dropped: a session keeps its last
    KEEP_COMMANDS rows, the oldest going first, so once it holds that many, a missing command acknowledged before
    the oldest one still there was dropped, not lost (a long run passes 200 in one session)."""
    first_kept = next((i for i, c in enumerate(acknowledged) if c in completed), len(acknowledged))
    dropped = first_kept if kept >= KEEP_COMMANDS else 0
    return [c for c in acknowledged[dropped:] if c not in completed]


def _age(path: Path) -> str:
    """How long ago the file was last written (a stray's age tells a kill just before start-up from an old one)."""
    try:
        return f"{time.time() - path.stat().st_mtime:.1f} s old"
    except FileNotFoundError:
        return "gone since"


def _integrity(path: Path) -> str:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return ", ".join(str(row[0]) for row in db.execute("PRAGMA integrity_check").fetchall())


def _data(result: Any) -> dict[str, Any]:
    if _reached(result).is_error:
        raise AssertionError(f"the call failed: {result.content}")
    structured: dict[str, Any] = result.structured_content
    return structured


def _reached(result: Any) -> Any:
    """The result, unless the state store could not be reached: the call was refused, or (a command that ran while
    it was down) answered that its end was not recorded. Neither is an acknowledgement (Unavailable)."""
    if result.is_error and (result.meta or {}).get(ERROR_META_KEY, {}).get("kind") == "state_unavailable":
        raise Unavailable
    if result.is_error and "its end could not be recorded" in str(result.content):
        raise Unavailable
    return result


def dump(ledger: Ledger) -> str:
    return json.dumps({**ledger.acknowledged, "notesLeft": ledger.notes_left}, sort_keys=True)
