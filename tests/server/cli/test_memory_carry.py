"""`managed-tools memory export` / `import` and the two importers, on real state files (and PostgreSQL): a bundle
round-trips byte for byte, bad input is one clear line with nothing written, imported items carry provenance
`import` and their source, and a credential is named on stderr but never printed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from conftest import _psql, data
from support.postgres_server import TEMPLATE, database_url

from managed_tools.server.cli import carrying
from managed_tools.server.cli.command import main
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import learnings, memory, sessions, substrate
from managed_tools.stores.db import Database
from managed_tools.stores.provenance import Provenance, Source

TOKEN = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
UNTRUSTED = Provenance(sources=(Source(kind="upstream", name="web_fetch", trust="untrusted"),))


class State:
    """A workspace's state: its flags for the command line, and how to open it in-process."""

    def __init__(self, root: Path, database: str | None) -> None:
        self.workspace, self.data_dir, self.database = root / "workspace", root / "data", database
        self.workspace.mkdir(parents=True, exist_ok=True)

    @property
    def flags(self) -> list[str]:
        given = ["--workspace", str(self.workspace), "--data-dir", str(self.data_dir)]
        return given + (["--database", self.database] if self.database else [])

    async def open(self) -> Database:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return await Database.open(self.database or self.data_dir / "state.db", local_dir=self.data_dir)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        async def fetch() -> list[tuple[Any, ...]]:
            db = await self.open()
            try:
                async with db.read() as tx:
                    return [tuple(row[key] for key in row.keys()) for row in await tx.fetchall(sql)]  # noqa: SIM118
            finally:
                await db.close()

        return anyio.run(fetch)


@pytest.fixture
def fresh(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Callable[[str], State]:
    """`fresh(name)`: another empty state on the test's engine (a new PostgreSQL database each)."""

    def make(name: str) -> State:
        if backend == "sqlite":
            return State(tmp_path / name, None)
        server: str = request.getfixturevalue("postgres_server")
        database = f"carry_{uuid.uuid4().hex[:12]}"
        _psql(server, f"CREATE DATABASE {database} TEMPLATE {TEMPLATE}")
        return State(tmp_path / name, database_url(server, database))

    return make


async def _fill(state: State) -> None:
    """Two agents' memory as tools leave it: session stores with several versions, the shared notes, learnings
    (one promoted), a substrate file's history with a restore; unicode and an untrusted source among them."""
    db = await state.open()
    try:
        async with db.write() as tx:
            first = await sessions.create_session(tx, "default", title="Résumé the parser")
            other = await sessions.create_session(tx, "reviewer", owner="https://issuer.example|ada")
            modes: tuple[tuple[str, Literal["replace", "append"]], ...] = (
                ("plan: read the code", "replace"), ("then fix 🐛 the bug", "append")
            )  # fmt: skip
            for text, mode in modes:
                await memory.write(
                    tx, scope=first.id, target="session_state", agent_id="default", session_id=first.id,
                    wake_id=None, content=text, mode=mode, source="memory_write", provenance=Provenance(),
                    searchable_title=memory.searchable_title("session_state", first.id),
                )  # fmt: skip
            await memory.write(
                tx, scope=other.id, target="working_buffer", agent_id="reviewer", session_id=other.id, wake_id=None,
                content="scratch: 東京 → 大阪", mode="replace", source="memory_write", provenance=UNTRUSTED,
                searchable_title=memory.searchable_title("working_buffer", other.id),
            )  # fmt: skip
            for note in ("- run pytest with -q from the repo root", "- the CI needs PostgreSQL 15"):
                await memory.write(
                    tx, scope=memory.agent_scope("default"), target="workspace_memory_notes", agent_id="default",
                    session_id=None, wake_id=None, content=note, mode="append", source="memory_promote_note",
                    provenance=Provenance().vouched("approval 1"), searchable_title="workspace_memory_notes",
                )  # fmt: skip
            await learnings.record(
                tx, agent_id="default", session_id=first.id, kind="lesson", title="Tests need -q",
                detail="execute pytest with -q from the repo root", promote=True,
            )  # fmt: skip
            await learnings.record(
                tx, agent_id="reviewer", session_id=other.id, kind="correction", title="Ünïcode names",
                detail="file names may hold ü and 字", promote=False, provenance=UNTRUSTED,
            )  # fmt: skip
            soul = "/workspace/agent/SOUL.md"
            one = await substrate.record_version(
                tx, agent_id="default", session_id=None, wake_id=None, source_path="(default)", target_path=soul,
                content="# Soul\nBe careful.\n", provenance=Provenance(),
            )  # fmt: skip
            await substrate.record_version(
                tx, agent_id="default", session_id=first.id, wake_id=None, source_path="/workspace/drafts/SOUL.md",
                target_path=soul, content="# Soul\nBe careful — and kind.\n", provenance=UNTRUSTED,
            )  # fmt: skip
            await substrate.record_version(
                tx, agent_id="default", session_id=first.id, wake_id=None, source_path=soul, target_path=soul,
                content="# Soul\nBe careful.\n", provenance=Provenance(), restored_from_version_id=one.id,
            )  # fmt: skip
    finally:
        await db.close()


def fill(state: State) -> State:
    anyio.run(_fill, state)
    return state


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def export(capsys: pytest.CaptureFixture[str], state: State, out: Path) -> bytes:
    status, _, err = cli(capsys, "memory", "export", "--out", str(out), *state.flags)
    assert status == 0, err
    return out.read_bytes()


MEMORY = (
    "SELECT scope, target, agent_id, session_id, content, content_hash, version_id, updated_at FROM memory_documents"
)
SEARCH = "SELECT key, source, agent_id, session_id, title, body FROM search_docs ORDER BY key"


@pytest.mark.both_backends
def test_export_import_export_is_byte_for_byte(
    tmp_path: Path, fresh: Callable[[str], State], capsys: pytest.CaptureFixture[str]
) -> None:
    source = fill(fresh("source"))
    first = export(capsys, source, tmp_path / "first.jsonl")
    lines = [json.loads(line) for line in first.splitlines()]
    assert lines[0] == {"kind": "header", "format": 2, "producer": lines[0]["producer"]}
    assert lines[-1] == {"kind": "end", "records": len(lines) - 2}
    kinds = [line["kind"] for line in lines[1:-1]]
    assert kinds == sorted(kinds, key=["session", "memory_version", "memory_head", "learning",
                                       "substrate_version"].index)  # fmt: skip
    assert {k: kinds.count(k) for k in set(kinds)} == {
        "session": 2, "memory_version": 5, "memory_head": 3, "learning": 2, "substrate_version": 3
    }  # fmt: skip
    assert "東京 → 大阪".encode() in first  # UTF-8 as it is, not \u escapes

    target = fresh("target")
    status, out, err = cli(capsys, "memory", "import", str(tmp_path / "first.jsonl"), *target.flags)
    assert status == 0, err
    assert out.strip().startswith("imported 2 sessions, 5 memory versions of 3 stores, 2 learnings, 3 substrate")
    again = export(capsys, target, tmp_path / "again.jsonl")
    assert again == first
    # What is derived is rebuilt, the same: each store's current document, the full-text index.
    assert sorted(target.rows(MEMORY)) == sorted(source.rows(MEMORY))
    assert target.rows(SEARCH) == source.rows(SEARCH)
    assert [r[0] for r in target.rows("SELECT target_path FROM substrate_versions ORDER BY seq")] == [
        "/workspace/agent/SOUL.md"
    ] * 3

    # Importing the same bundle again finds everything here already and changes nothing.
    status, out, err = cli(capsys, "memory", "import", str(tmp_path / "first.jsonl"), *target.flags)
    assert status == 0 and "(15 records already here, skipped)" in out, err
    assert export(capsys, target, tmp_path / "third.jsonl") == first


def test_a_dry_run_says_what_it_would_import_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = fill(State(tmp_path / "source", None))
    export(capsys, source, tmp_path / "bundle.jsonl")
    target = State(tmp_path / "target", None)
    status, out, _ = cli(capsys, "memory", "import", str(tmp_path / "bundle.jsonl"), "--dry-run", *target.flags)
    assert status == 0 and out.startswith("would import 2 sessions, 5 memory versions of 3 stores")
    assert target.rows("SELECT COUNT(*) FROM learnings") == [(0,)]
    assert target.rows("SELECT COUNT(*) FROM sessions") == [(0,)]


def _bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    source = fill(State(tmp_path / "source", None))
    return [json.loads(line) for line in export(capsys, source, tmp_path / "good.jsonl").splitlines()]


def _write(path: Path, records: list[dict[str, Any]], *, raw: dict[int, bytes] | None = None) -> Path:
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in records]
    for index, line in (raw or {}).items():
        lines[index] = line
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _edit(records: list[dict[str, Any]], which: str, **changes: Any) -> list[dict[str, Any]]:
    index = next(i for i, r in enumerate(records) if r["kind"] == which)
    return [*records[:index], {**records[index], **changes}, *records[index + 1 :]]


BAD: dict[str, tuple[Callable[[list[dict[str, Any]]], tuple[list[dict[str, Any]], dict[int, bytes]]], str]] = {
    "corrupt line": (lambda r: (r, {3: b'{"kind": "memory_version", "id": '}), "line 4: Invalid JSON"),
    "wrong kind": (lambda r: (_edit(r, "learning", kind="belief"), {}), "does not match any of the expected tags"),
    "extra field": (lambda r: (_edit(r, "learning", admin=True), {}), "learning.admin: Extra inputs are not"),
    "tampered content": (lambda r: (_edit(r, "memory_version", content="rewritten"), {}), "content_hash is not"),
    "path escape": (
        lambda r: (_edit(r, "substrate_version", target_path="/workspace/agent/../../etc/cron.d/x"), {}),
        "is not a normalised path under /workspace",
    ),
    "a session of another agent": (
        lambda r: (_edit(r, "memory_version", agent_id="intruder"), {}), "belongs to session"
    ),
    "scope of another agent": (
        lambda r: (_edit(r, "memory_version", scope="agent:intruder"), {}), "belongs in scope"
    ),
    "newer format": (lambda r: (_edit(r, "header", format=3), {}), "this bundle is format 3, newer than"),
    "cut short": (lambda r: (r[:-1], {}), "has no end record: it was cut short"),
    "a NUL": (lambda r: (_edit(r, "learning", title="a\x00b"), {}), "learning.title: holds a NUL character"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_bundle_is_one_clear_line_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    change, expected = BAD[case]
    records, raw = change(_bundle(tmp_path, capsys))
    path = _write(tmp_path / "bad.jsonl", records, raw=raw)
    target = State(tmp_path / "target", None)
    status, out, err = cli(capsys, "memory", "import", str(path), *target.flags)
    assert status == 1 and out == "" and expected in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("managed-tools: ")
    assert target.rows("SELECT COUNT(*) FROM sessions") + target.rows("SELECT COUNT(*) FROM learnings") == [(0,), (0,)]


def test_a_long_import_says_how_far_it_is_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    export(capsys, fill(State(tmp_path / "source", None)), tmp_path / "bundle.jsonl")
    monkeypatch.setattr(carrying, "PROGRESS_SECONDS", 0.0)  # every record is "a while" later
    status, out, err = cli(
        capsys, "memory", "import", str(tmp_path / "bundle.jsonl"), *State(tmp_path / "t", None).flags
    )
    assert status == 0 and out.startswith("imported "), err
    assert "managed-tools: imported 1 of 15 records…" in err and "imported 15 of 15 records…" in err


def test_a_huge_line_is_refused_before_it_is_read_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = _bundle(tmp_path, capsys)
    huge = json.dumps({"kind": "session", "title": "x" * (17 * 1024 * 1024)}).encode()
    path = _write(tmp_path / "huge.jsonl", records, raw={1: huge})
    status, _, err = cli(capsys, "memory", "import", str(path), *State(tmp_path / "target", None).flags)
    assert status == 1 and "line 2 is longer than 16,777,216 bytes: refused." in err, err


def test_a_conflict_late_in_the_bundle_rolls_back_everything_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = _bundle(tmp_path, capsys)
    target = State(tmp_path / "target", None)
    learning = next(r for r in records if r["kind"] == "learning")

    async def clash() -> None:  # the same learning id here already, with other text
        db = await target.open()
        async with db.write() as tx:
            await learnings.insert(tx, learnings.Learning(
                id=learning["id"], agent_id="default", session_id=None, kind="lesson", title="mine", detail="mine",
                promote_to_memory=False, created_at=learning["created_at"],
            ))  # fmt: skip
        await db.close()

    anyio.run(clash)
    status, _, err = cli(capsys, "memory", "import", str(_write(tmp_path / "b.jsonl", records)), *target.flags)
    assert status == 1 and f"learning {learning['id']} exists here as another (title, detail)" in err, err
    assert target.rows("SELECT COUNT(*) FROM sessions") == [(0,)]  # written before the clash, rolled back with it
    assert target.rows("SELECT COUNT(*) FROM memory_versions") == [(0,)]


def test_a_store_with_its_own_history_here_is_never_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export(capsys, fill(State(tmp_path / "source", None)), tmp_path / "bundle.jsonl")
    target = fill(State(tmp_path / "target", None))  # the same kinds of store, with versions of its own
    status, _, err = cli(capsys, "memory", "import", str(tmp_path / "bundle.jsonl"), *target.flags)
    assert status == 1 and "already has 2 versions of its own here, which the bundle lacks" in err, err


def test_export_names_a_credential_on_stderr_never_prints_it_and_keeps_the_file_private(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = State(tmp_path / "source", None)

    async def leak() -> None:
        db = await state.open()
        async with db.write() as tx:
            await learnings.record(
                tx, agent_id="default", session_id=None, kind="error", title="deploy failed",
                detail=f"the token {TOKEN} expired", promote=False,
            )  # fmt: skip
        await db.close()

    anyio.run(leak)
    out = tmp_path / "bundle.jsonl"
    bundle = export(capsys, state, out)
    assert TOKEN.encode() in bundle  # carried exactly: a bundle restores a state
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    status, stdout, err = cli(capsys, "memory", "export", *state.flags)  # to stdout
    assert status == 0 and TOKEN in stdout and TOKEN not in err
    assert "bundle line 2 (learning " in err and "GitHub Token" in err and "keep the output private" in err


REFERENCE: list[dict[str, Any]] = [
    {"type": "entity", "name": "Ada Lovelace", "entityType": "person",
     "observations": ["Wrote the first program", "Prefers notes in Markdown"]},
    {"type": "entity", "name": "Analytical Engine", "entityType": "machine", "observations": ["Designed by Babbage"]},
    {"type": "entity", "name": "東京オフィス", "entityType": "place",
     "observations": ["Opens at 9:00 JST", "駅から5分"]},
    {"type": "relation", "from": "Ada Lovelace", "to": "Analytical Engine", "relationType": "programmed"},
    {"type": "relation", "from": "Ada Lovelace", "to": "東京オフィス", "relationType": "visits"},
    {"type": "relation", "from": "Charles Babbage", "to": "Analytical Engine", "relationType": "designed"},
]  # fmt: skip


def test_the_reference_memory_servers_graph_becomes_learnings_with_their_file_and_line(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "memory.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in REFERENCE), encoding="utf-8")
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    flags = ["--workspace", str(workspace)]
    status, out, _ = cli(capsys, "memory", "import", "--from", "reference-memory", str(path), "--dry-run", *flags)
    assert status == 0 and out.startswith("would import 4 learnings for agent default from 4 entities")
    status, out, err = cli(capsys, "memory", "import", "--from", "reference-memory", str(path), *flags)
    assert status == 0, err
    assert out == f"imported 4 learnings for agent default from 4 entities and relations in {path}.\n"

    async def search() -> dict[str, Any]:
        from mcp import Client

        async with open_runtime(config) as runtime, Client(build_server(runtime, transport="memory")) as client:
            listed = data(await client.call_tool("learning_list", {}))
            found = data(await client.call_tool("memory_search", {"query": "Analytical Engine programmed"}))
            return {"listed": listed, "found": found}

    seen = anyio.run(search)
    ada = next(item for item in seen["listed"]["learnings"] if item["title"] == "Ada Lovelace (person)")
    assert ada["detail"] == (
        "- Wrote the first program\n- Prefers notes in Markdown\n- programmed → Analytical Engine\n"
        "- visits → 東京オフィス"
    )
    assert ada["trust"] == "untrusted" and ada["provenance"] == (
        f"trust untrusted; sources: import reference-memory {path}:1 (untrusted), import reference-memory "
        f"{path}:4 (untrusted), import reference-memory {path}:5 (untrusted)"
    )
    loose = next(item for item in seen["listed"]["learnings"] if item["title"].startswith("Charles"))
    assert f"{path}:6" in loose["provenance"]  # a relation from no entity of the file: a learning of its own
    hit = seen["found"]["hits"][0]
    assert "Ada Lovelace" in hit["title"] and hit["trust"] == "untrusted", hit

    # Again: every item is here already with the same text, so nothing doubles.
    status, out, _ = cli(capsys, "memory", "import", "--from", "reference-memory", str(path), *flags)
    assert status == 0 and "imported 0 learnings" in out and "4 already here with the same text" in out


def test_a_bad_reference_memory_line_is_named_and_nothing_is_written(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "memory.jsonl"
    lines = [json.dumps(REFERENCE[0]), json.dumps({**REFERENCE[1], "createdAt": "2025-01-01"})]
    path.write_text("\n".join(lines) + "\n")
    state = State(tmp_path, None)
    status, _, err = cli(capsys, "memory", "import", "--from", "reference-memory", str(path), *state.flags)
    assert status == 1 and f"{path} line 2: entity.createdAt: Extra inputs are not permitted." in err, err
    assert not (state.data_dir / "state.db").exists()  # refused before the state was opened


NOTES = {
    "coffee/brewing.md": """---
title: Coffee Brewing Methods
type: note
tags: [coffee, brewing]
permalink: coffee-brewing-methods
---

# Coffee Brewing Methods

## Observations
- [method] Pour over provides more flavor clarity than French press
- [technique] Water at 96°C extracts the best compounds #brewing
- [preference] Ethiopian beans suit lighter roasts (personal experience)

## Relations
- relates_to [[Coffee Bean Origins]]
- requires [[Proper Grinding Technique]]
""",
    "people/ada.md": """---
title: Ada Lovelace
type: Person
tags: mathematics, programming
status: active
---

## Observations
- [fact] Wrote the first published program #history
- [preference] Prefers café au lait

## Relations
- works_on [[Analytical Engine]]
""",
    "日本/東京.md": "# 東京\n\n- [place] The office is five minutes from the station\n- near [[大阪]]\n",
    ".obsidian/workspace.md": "not a note",
    "README.txt": "not markdown",
}


def _notes(root: Path) -> Path:
    for name, text in NOTES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_basic_memory_notes_become_learnings_with_their_path(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _notes(tmp_path / "basic-memory")
    state = State(tmp_path, None)
    state.workspace, state.data_dir = workspace, tmp_path / "data"
    status, out, err = cli(capsys, "memory", "import", "--from", "basic-memory", str(root), "--agent", "notes",
                           *state.flags)  # fmt: skip
    assert status == 0, err
    assert out == f"imported 3 learnings for agent notes from 3 notes (6 observations, 4 relations) in {root}.\n"
    rows = state.rows("SELECT title, detail, provenance, agent_id, kind FROM learnings ORDER BY created_at, id")
    assert [r[0] for r in rows] == ["Coffee Brewing Methods", "Ada Lovelace", "東京"]
    coffee, ada, tokyo = rows
    assert coffee[1].startswith("type: note · tags: coffee, brewing · permalink: coffee-brewing-methods\n## Obs")
    assert ada[1].startswith("type: Person · tags: mathematics, programming\n## Obs") and "status" not in ada[1]
    assert tokyo[1] == "type: note\n- [place] The office is five minutes from the station\n- near [[大阪]]"
    assert json.loads(ada[2]) == [
        {"kind": "import", "name": f"basic-memory {root / 'people/ada.md'}", "trust": "untrusted"}
    ]
    assert {r[3] for r in rows} == {"notes"} and {r[4] for r in rows} == {"lesson"}


@pytest.mark.parametrize("case", ["symlink to a file outside", "symlink to a folder outside", "bad front matter"])
def test_a_basic_memory_dir_that_escapes_or_does_not_parse_writes_nothing(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    root = _notes(tmp_path / "basic-memory")
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "passwords.md").write_text("root: hunter2\n")
    if case == "symlink to a file outside":
        os.symlink(secret / "passwords.md", root / "coffee" / "zz.md")
        expected = f"coffee/zz.md in {root} is a symbolic link (to {secret / 'passwords.md'})"
    elif case == "symlink to a folder outside":
        os.symlink(secret, root / "linked")
        expected = f"linked in {root} is a symbolic link (to {secret})"
    else:
        (root / "people" / "bad.md").write_text("---\ntitle: [unclosed\n---\nbody\n")
        expected = "people/bad.md: its front matter is not YAML"
    state = State(tmp_path, None)
    state.workspace = workspace
    status, out, err = cli(capsys, "memory", "import", "--from", "basic-memory", str(root), *state.flags)
    assert status == 1 and out == "" and expected in err and err.count("\n") == 1, err
    assert "hunter2" not in err
    assert not (state.data_dir / "state.db").exists() or state.rows("SELECT COUNT(*) FROM learnings") == [(0,)]


def test_an_imported_credential_is_masked_and_named_never_shown(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "deploy.md").write_text(f"# Deploy\n\n- [fact] the deploy token is {TOKEN}\n")
    state = State(tmp_path, None)
    state.workspace = workspace
    status, _, err = cli(capsys, "memory", "import", "--from", "basic-memory", str(root), *state.flags)
    assert status == 0 and "GitHub Token" in err and "masked" in err and TOKEN not in err, err
    [(detail,)] = state.rows("SELECT detail FROM learnings")
    assert TOKEN not in detail and "the deploy token is" in detail


def test_export_and_import_as_a_person_runs_them(tmp_path: Path) -> None:
    """The installed command in its own processes: the summary lines, the exit statuses, a usage error."""
    source = fill(State(tmp_path / "source", None))
    target = State(tmp_path / "target", None)
    bundle = tmp_path / "bundle.jsonl"

    def command(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "managed_tools.server", *argv], capture_output=True, text=True, timeout=60,
            check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    exported = command("memory", "export", "--out", str(bundle), *source.flags)
    assert exported.returncode == 0 and exported.stdout == "", exported.stderr
    assert exported.stderr.startswith("managed-tools: exported 2 sessions, 5 memory versions of 3 stores")
    imported = command("memory", "import", str(bundle), *target.flags)
    assert imported.returncode == 0 and imported.stdout.startswith("imported 2 sessions"), imported.stderr
    nowhere = command("memory", "export", "--out", str(tmp_path / "missing" / "b.jsonl"), *source.flags)
    assert nowhere.returncode == 1 and "cannot write" in nowhere.stderr and "No such file" in nowhere.stderr
    wrong = command("memory", "import", *target.flags)
    assert wrong.returncode == 1 and "memory import takes one FILE" in wrong.stderr
    assert "Traceback" not in wrong.stderr
