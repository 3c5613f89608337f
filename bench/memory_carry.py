"""How long `managed-tools memory export` and `memory import` take, and how large a bundle is, against the stores
writing the same records (the baseline, in the same run): N learnings, N/10 memory versions in N/100 session
stores, N/100 substrate versions, in a real SQLite state. Each command is its own process, as a person's would be.
It is a benchmark, not a test: the exit status is 0 whatever the figures are.

    python bench/memory_carry.py [--learnings 10000] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from managed_tools.stores import learnings, memory, sessions, substrate
from managed_tools.stores.db import Database
from managed_tools.stores.provenance import Provenance


async def _fill(data_dir: Path, count: int) -> None:
    db = await Database.open(data_dir / "state.db", local_dir=data_dir)
    try:
        async with db.write() as tx:
            for store in range(max(count // 100, 1)):
                session = await sessions.create_session(tx, "default", title=f"session {store}")
                for version in range(10):
                    await memory.write(
                        tx, scope=session.id, target="session_state", agent_id="default", session_id=session.id,
                        wake_id=None, content=f"- step {version}: read module {store} and fix its tests", mode="append",
                        source="memory_write", provenance=Provenance(),
                        searchable_title=memory.searchable_title("session_state", session.id),
                    )  # fmt: skip
                await substrate.record_version(
                    tx, agent_id="default", session_id=None, wake_id=None, source_path="(default)",
                    target_path=f"/workspace/agent/notes/{store}.md", content=f"# Notes {store}\n" * 20,
                    provenance=Provenance(),
                )  # fmt: skip
            for number in range(count):
                await learnings.record(
                    tx, agent_id="default", session_id=None, kind="lesson", title=f"lesson {number}",
                    detail=f"run pytest -q in package {number % 97} before a commit; flaky {number}", promote=False,
                )  # fmt: skip
    finally:
        await db.close()


def _command(*argv: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "managed_tools.server", *argv], check=True, capture_output=True, timeout=600)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learnings", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        (root / "workspace").mkdir()
        (root / "source").mkdir()
        started = time.perf_counter()
        anyio.run(_fill, root / "source", args.learnings)
        baseline = time.perf_counter() - started
        flags = ["--workspace", str(root / "workspace")]
        bundle = root / "bundle.jsonl"
        exported = _command("memory", "export", "--out", str(bundle), *flags, "--data-dir", str(root / "source"))
        imported = _command("memory", "import", str(bundle), *flags, "--data-dir", str(root / "target"))
        again = root / "again.jsonl"
        _command("memory", "export", "--out", str(again), *flags, "--data-dir", str(root / "target"))
        figures = {
            "learnings": args.learnings,
            "records": sum(1 for _ in bundle.open("rb")) - 2,
            "bundle_bytes": bundle.stat().st_size,
            "stores_writing_them_s": round(baseline, 2),
            "export_s": round(exported, 2),
            "import_s": round(imported, 2),
            "round_trip_identical": bundle.read_bytes() == again.read_bytes(),
        }
    if args.json:
        print(json.dumps(figures))
        return
    for name, value in figures.items():
        print(f"{name:24} {value}")


if __name__ == "__main__":
    main()
