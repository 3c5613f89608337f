"""Crashes: a server killed at the worst moment of a substrate promotion is healed at its next start-up, and a
server killed at random moments of a mixed workload keeps everything it acknowledged (tests/support/crash_workload.py;
bench/crash.py runs the long form, a hundred kills).

Every server here is a real `managed-tools serve` subprocess spoken to over stdio by `mcp.Client`; the kills are
real (`os._exit` at an exact point, inside the promotion, or SIGKILL of the process group at a random moment).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import data
from mcp import Client, StdioServerParameters
from support.crash_workload import Crashes, dump

from managed_tools.sandbox.files import atomic_write, temp_name, use_temp_key
from managed_tools.sandbox.mounts import substrate_dir
from managed_tools.sandbox.paths import Resolved
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.leftovers import temp_key
from managed_tools.stores import substrate as store
from managed_tools.stores.provenance import Provenance
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

PROBE = str(Path(__file__).resolve().parents[1] / "support" / "crash_probe.py")
SOUL = "# Soul\nbe kind\n"
EDITED = "# Soul\nbe kind and brief\n"


@asynccontextmanager
async def serve(workspace: Path, *extra: str) -> AsyncIterator[Client]:
    args = ["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--tools-module", PROBE, *extra]
    async with Client(StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))) as client:
        yield client


async def die_during_promotion(workspace: Path, die: str, target: str) -> None:
    """One call of the real promotion with the server killed at `die`; the client sees its server go."""
    (workspace / "draft.md").write_text(EDITED)
    args = {"sourcePath": "draft.md", "targetPath": target, "overwrite": True, "die": die}
    died = False
    with anyio.fail_after(60):
        try:
            async with serve(workspace) as client:
                await client.call_tool("probe_promote_then_die", args)
        except Exception:
            died = True
    assert died, "the server survived its promotion"


async def history(workspace: Path, target: str) -> list[dict[str, Any]]:
    async with serve(workspace) as client:  # start-up heals before it answers
        listed = data(await client.call_tool("resources_list_versions", {"targetPath": target, "limit": 10}))
    return list(listed["versions"])


def edit_of(runtime: Runtime, target: Resolved) -> dict[str, Any]:
    """`record_version`'s fields for promoting EDITED over `target`."""
    return {
        "agent_id": runtime.environment.agent_id,
        "session_id": None,
        "wake_id": None,
        "source_path": "/workspace/draft.md",
        "target_path": target.virtual,
        "content": EDITED,
        "provenance": Provenance(),
    }


async def die_before_the_commit(runtime: Runtime, target: Resolved, previous: bytes | None) -> None:
    """A promotion's version recorded and its pending note written, then rolled back as a killed process's
    transaction is: the note outlives a version that never committed."""
    with suppress(RuntimeError):
        async with runtime.db.write() as tx:
            dead = await store.record_version(tx, **edit_of(runtime, target))
            store.note_pending(runtime.db, dead, target, previous)
            raise RuntimeError("rolled back, as a killed process's transaction is")


def pending(config: ServeConfig) -> list[Path]:
    folder = config.data_dir / store.PENDING_DIR
    return sorted(folder.iterdir()) if folder.is_dir() else []


async def test_killed_between_the_rename_and_the_commit_the_old_file_comes_back(
    config: ServeConfig, workspace: Path
) -> None:
    soul = substrate_dir(config.data_dir, config.agent) / "SOUL.md"
    soul.parent.mkdir(parents=True)
    soul.write_text(SOUL)
    await die_during_promotion(workspace, "after_rename", "SOUL.md")
    assert soul.read_text() == EDITED and len(pending(config)) == 1  # what the crash left: a file with no version
    assert await history(workspace, "SOUL.md") == []
    assert soul.read_text() == SOUL and pending(config) == []


async def test_a_new_file_killed_before_its_commit_is_removed(config: ServeConfig, workspace: Path) -> None:
    await die_during_promotion(workspace, "after_rename", "notes/new.md")
    made = substrate_dir(config.data_dir, config.agent) / "notes" / "new.md"
    assert made.read_text() == EDITED
    assert await history(workspace, "notes/new.md") == []
    assert not made.exists() and pending(config) == []


async def test_killed_before_the_rename_the_file_is_untouched_and_its_temporary_goes(
    config: ServeConfig, workspace: Path
) -> None:
    soul = substrate_dir(config.data_dir, config.agent) / "SOUL.md"
    soul.parent.mkdir(parents=True)
    soul.write_text(SOUL)
    await die_during_promotion(workspace, "before_rename", "SOUL.md")
    use_temp_key(temp_key(config.data_dir))
    half_written = soul.with_name(temp_name("SOUL.md"))  # as a kill inside the write itself leaves
    half_written.write_text(EDITED[:5])
    os.utime(half_written, (time.time() - 60,) * 2)  # a minute ago, not a write just beginning
    look_alike = soul.with_name(".SOUL.md.0123456789ab.tmp")  # another program's, in the form we once used
    look_alike.write_text("not ours\n")
    assert len(pending(config)) == 1
    assert await history(workspace, "SOUL.md") == []
    assert soul.read_text() == SOUL and not half_written.exists() and pending(config) == []
    assert look_alike.exists()


async def test_killed_inside_the_write_its_temporary_goes_at_once(config: ServeConfig, workspace: Path) -> None:
    """The crash suite's "temporary files left in the substrate": a kill between the temporary file's write and its
    rename, and a start-up sooner after it than the sweep's FRESH_SECONDS. Healing holds the write lock every
    substrate write holds, so the dead write's file goes however young it is."""
    soul = substrate_dir(config.data_dir, config.agent) / "SOUL.md"
    soul.parent.mkdir(parents=True)
    soul.write_text(SOUL)
    await die_during_promotion(workspace, "in_write", "SOUL.md")
    (left,) = soul.parent.glob(".SOUL.md.*.tmp")
    assert left.read_text() == EDITED and soul.read_text() == SOUL and len(pending(config)) == 1
    future = time.time() + 60  # as young at the sweep as after a fast start, however slowly this machine starts
    os.utime(left, (future, future))
    assert await history(workspace, "SOUL.md") == []
    assert soul.read_text() == SOUL and not left.exists() and pending(config) == []


async def test_healing_removes_a_dead_writes_temporary_written_an_instant_ago(runtime: Runtime) -> None:
    """In one process, so the sweep surely comes within FRESH_SECONDS of the file: the crash flake, made exact."""
    target = runtime.guard.resolve("/workspace/agent/SOUL.md")
    await die_before_the_commit(runtime, target, None)
    before = target.host.read_bytes()
    left = target.host.with_name(temp_name("SOUL.md"))  # written, unlocked (its writer is gone), not renamed
    left.write_text(EDITED)
    assert await store.heal_interrupted(runtime.db) == []
    assert not left.exists() and target.host.read_bytes() == before


async def test_a_committed_version_keeps_its_file_when_its_note_outlives_it(runtime: Runtime) -> None:
    """Killed after the commit but before the note was removed: start-up only drops the note."""
    target = runtime.guard.resolve("/workspace/agent/SOUL.md")
    async with runtime.db.write() as tx:
        version = await store.record_version(tx, **edit_of(runtime, target))
        store.note_pending(runtime.db, version, target, None)  # never forgotten, as if killed right after COMMIT
        atomic_write(target, EDITED.encode())
    assert len(list((runtime.environment.data_dir / store.PENDING_DIR).iterdir())) == 1
    assert await store.heal_interrupted(runtime.db) == []
    assert target.host.read_text() == EDITED
    assert list((runtime.environment.data_dir / store.PENDING_DIR).iterdir()) == []


async def test_a_dead_write_whose_bytes_a_later_promotion_committed_is_kept(runtime: Runtime) -> None:
    """The dead process's version never committed, but another process promoted the same bytes since: the file
    already agrees with the head of its history, so start-up leaves it."""
    target = runtime.guard.resolve("/workspace/agent/SOUL.md")
    await die_before_the_commit(runtime, target, SOUL.encode())
    async with runtime.db.write() as tx:
        await store.record_version(tx, **edit_of(runtime, target))
    atomic_write(target, EDITED.encode())
    assert await store.heal_interrupted(runtime.db) == []
    assert target.host.read_text() == EDITED


async def test_write_transactions_reach_the_disk_before_they_are_acknowledged(runtime: Runtime) -> None:
    """WAL at synchronous=NORMAL can lose the last commits to a power cut: write transactions (memory, substrate
    versions, approvals) commit at FULL; single-statement event appends stay at NORMAL
    (docs/decisions/crash-safety.md)."""
    full, normal = 2, 1
    async with runtime.db.write() as tx:
        assert await tx.scalar("PRAGMA synchronous") == full
    assert await runtime.db.record(lambda tx: tx.scalar("PRAGMA synchronous")) == normal


KILLS = 5


async def test_kill_9_at_random_moments_loses_nothing_acknowledged(workspace: Path, tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED") or random.randrange(2**32))
    print(f"crash seed {seed} (CRASH_SEED={seed} repeats this run)")
    crashes = Crashes(workspace, tmp_path / "data", random.Random(seed))
    found: list[str] = []
    for _ in range(KILLS):
        _, problems = await crashes.round(max_delay=1.5)
        found += problems
    found += await crashes.last_check()
    print(f"crash seed {seed}: acknowledged {dump(crashes.ledger)}")
    assert found == [], f"seed {seed}: {found}"
    assert sum(crashes.ledger.acknowledged.values()) > 0, (
        f"seed {seed}: nothing was acknowledged; {dump(crashes.ledger)}"
    )
