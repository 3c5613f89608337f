"""PostgreSQL as the shared store: the same search answers as SQLite's FTS5, `managed-tools migrate`, and errors
that never show a password. (The store and tool tests marked `both_backends` run on both engines too.)"""

from __future__ import annotations

import itertools
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Connect, _psql, data
from support.postgres_server import TEMPLATE, database_url

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import event_search, events, search, sessions
from managed_tools.stores.db import Database
from managed_tools.stores.db.fulltext import words
from managed_tools.stores.errors import StoreError
from managed_tools.stores.event_search import EventScope
from managed_tools.stores.sessions import LOCAL_OWNER

pytestmark = pytest.mark.anyio

VOCABULARY = ["deploy", "Déploy", "cache", "cache-key", "/workspace/notes.md", "notes", "rollback", "ÉLAN", "élan",
              "x²", "foo_bar", "alpha", "beta", "gamma", "ship it", "v1.2.3", "naïve", "NAIVE", "日本語",
              "tests"]  # fmt: skip


def _texts(count: int) -> list[str]:
    rng = random.Random(17)
    return [" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 30))) for _ in range(count)]


QUERIES: list[tuple[list[str], list[str]]] = [
    (["deploy"], []), (["cache", "key"], []), (["notes"], ["workspace notes"]), (["elan"], []), (["naive"], []),
    (["foo"], ["ship it"]), (["x²"], []), (["日本語"], []), (["rollback", "gamma", "missing"], []), ([], ["v1 2"]),
]  # fmt: skip


def test_words_are_fts5s_unicode61_words() -> None:
    assert words("Déploy the cache-key to /workspace/notes.md, ÉLAN foo_bar x² 日本語") == [
        "deploy", "the", "cache", "key", "to", "workspace", "notes", "md", "elan", "foo", "bar", "x²", "日本語",
    ]  # fmt: skip


# The sessions' agents and owners: the local principal's, another agent's, and an OAuth principal's of "default".
ALICE = "oauth:" + "a" * 32
SESSIONS = [("default", LOCAL_OWNER), ("default", LOCAL_OWNER), ("other", LOCAL_OWNER), ("default", ALICE)]


async def _fill(db: Database, texts: list[str]) -> tuple[str, list[str]]:
    async with db.write() as tx:
        agent_sessions = [(await sessions.create_session(tx, agent, owner=owner)).id for agent, owner in SESSIONS]
        for i, text in enumerate(texts):
            session = agent_sessions[i % len(SESSIONS)]
            agent = SESSIONS[i % len(SESSIONS)][0]
            await search.upsert(tx, key=f"doc:{i}", source="learning", agent_id=agent, session_id=session,
                                title=f"t{i}", body=text)  # fmt: skip
            await events.append_event(tx, session, None, "user.note", {"text": text, "spanId": "deploy"})
        await search.upsert(tx, key="doc:3", source="learning", agent_id="default", session_id=None, title="t",
                            body="rewritten deploy deploy deploy")  # fmt: skip
    return agent_sessions[0], agent_sessions


async def test_search_answers_the_same_on_both_engines(tmp_path: Path, postgres_server: str) -> None:
    """The same texts in SQLite (FTS5, bm25) and PostgreSQL give the same results in the same order with the same
    scores, for memory search and for event search, across case, diacritics, punctuation and phrases."""
    server = postgres_server
    _psql(server, f"CREATE DATABASE same_answers TEMPLATE {TEMPLATE}")
    answers: dict[str, list[object]] = {}
    texts = _texts(400)
    for name, target in (("sqlite", tmp_path / "state.db"), ("postgresql", database_url(server, "same_answers"))):
        db = await Database.open(target, local_dir=tmp_path)
        try:
            first, all_sessions = await _fill(db, texts)
            found: list[object] = []
            async with db.read() as tx:
                for (terms, phrases), owner in itertools.product(QUERIES, (LOCAL_OWNER, ALICE)):
                    rows = await search.search(tx, "default", terms, phrases, 15, owner=owner, fallback_words=["beta"])
                    found.append([(r.key, round(r.bm25, 9), r.body) for r in rows])
                    scopes = (
                        EventScope("default", owner),
                        EventScope("default", owner, exclude_session=first),
                        EventScope("default", owner, sessions=all_sessions[:1], types=["user.note"]),
                    )
                    for scope in scopes:
                        matches = await event_search.search_events(
                            tx, scope, terms, phrases, 12, whole=" ".join([*phrases, *terms])
                        )
                        found.append([(all_sessions.index(m.session_id), m.body) for m in matches])
            answers[name] = found
        finally:
            await db.close()
    assert answers["sqlite"] == answers["postgresql"]
    assert sum(1 for a in answers["sqlite"] if a) > len(QUERIES)  # most queries found something


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "managed_tools.server", *args], check=False, capture_output=True, text=True, timeout=120,
        env=dict(os.environ),
    )  # fmt: skip


async def test_migrate_copies_an_sqlite_state_into_postgresql(
    workspace: Path, connect: Connect, postgres_server: str
) -> None:
    sqlite_config = ServeConfig.build(workspace=workspace, data_dir=None)
    async with open_runtime(sqlite_config) as runtime, connect(runtime) as client:
        written = data(await client.call_tool("memory_write", {"target": "session_state", "content": "zebra plan"}))
        await client.call_tool("planning_setup_plan", {"objective": "ship", "initialSteps": ["one", "two"]})
    _psql(postgres_server, f"CREATE DATABASE migrated TEMPLATE {TEMPLATE}")
    empty_url = database_url(postgres_server, "migrated")
    copied = _run("migrate", "--from", str(sqlite_config.data_dir), "--to", empty_url)
    assert copied.returncode == 0, copied.stderr
    assert "verified by counts" in copied.stdout and "memory_versions" in copied.stdout
    assert re.search(r"^sessions +1 row$", copied.stdout, re.M) and " 1 rows" not in copied.stdout  # one session

    again = _run("migrate", "--from", str(sqlite_config.data_dir), "--to", empty_url)
    assert again.returncode == 1 and "already holds state" in again.stderr and "--replace" in again.stderr
    replaced = _run("migrate", "--from", str(sqlite_config.data_dir), "--to", empty_url, "--replace")
    assert replaced.returncode == 0, replaced.stderr

    pg_config = sqlite_config.model_copy(update={"database": empty_url})
    async with open_runtime(pg_config) as runtime:
        async with connect(runtime, session_id=written["sessionId"]) as client:
            read = data(await client.call_tool("memory_read", {"target": "session_state"}))
            plan = data(await client.call_tool("planning_read_plan", {}))
            after = {"target": "session_state", "content": "after", "expectedVersionId": written["versionId"]}
            found = data(await client.call_tool("memory_search", {"query": "zebra"}))
            more = data(await client.call_tool("memory_write", after))
        async with connect(runtime) as client:  # another session finds the copied one's events
            traces = data(await client.call_tool("session_search_context", {"query": "zebra"}))
    assert read["versionId"] == written["versionId"] and read["content"] == "zebra plan\n"
    assert [s["title"] for s in plan["plan"]["steps"]] == ["one", "two"]
    assert more["previousVersionId"] == written["versionId"]
    assert found["hits"] and traces["hits"], (found, traces)


async def test_bad_databases_are_one_clear_line_without_the_password(tmp_path: Path) -> None:
    refused = _run("pending", "--database", "postgresql://someone:hunter2secret@127.0.0.1:1/nowhere")
    assert refused.returncode == 1 and "Cannot reach PostgreSQL" in refused.stderr
    assert "hunter2secret" not in refused.stderr and "Traceback" not in refused.stderr
    not_a_url = _run("serve", "--database", "mysql://x")
    assert not_a_url.returncode == 2 and "--database takes a PostgreSQL URL" in not_a_url.stderr
    no_source = _run("migrate", "--from", str(tmp_path / "nothing"), "--to", "postgresql://127.0.0.1:1/x")
    assert no_source.returncode == 2 and "No SQLite state" in no_source.stderr


async def test_a_nul_character_is_a_clear_refusal_on_postgresql(tmp_path: Path, postgres_server: str) -> None:
    _psql(postgres_server, f"CREATE DATABASE nul_text TEMPLATE {TEMPLATE}")
    db = await Database.open(database_url(postgres_server, "nul_text"), local_dir=tmp_path)
    try:
        with pytest.raises(StoreError, match="cannot store the NUL character"):
            async with db.write() as tx:
                await sessions.create_session(tx, "default", title="a\x00b")
        async with db.read() as tx:
            assert await tx.scalar("SELECT COUNT(*) FROM sessions") == 0
    finally:
        await db.close()
