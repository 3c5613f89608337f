"""Numbered schema migrations, applied in order at start-up on either engine (`stores.db.sqlite`, `stores.db.postgres`).

One list for both: a plain statement runs on both (on PostgreSQL through `postgresql_ddl`, which only widens
SQLite's column types); `Each` spells a statement per engine, or leaves it out of one (None). The tables and columns
are the same on both, so `managed-tools migrate` copies one into the other column by column; the engines differ in
triggers and in the full-text index (FTS5 on SQLite; on PostgreSQL a `tsvector` of the words `stores.db.fulltext`
finds, written by the stores). Append new migrations; never edit one that has shipped.
"""

from typing import Literal

from managed_tools.stores.db.dialect import POSTGRESQL, SQLITE, Dialect, Each, Statement, postgresql_ddl
from managed_tools.stores.db.migrations_1_3 import MIGRATIONS_1_3
from managed_tools.stores.db.migrations_4_10 import MIGRATIONS_4_10


def statements(migration: tuple[int, str, tuple[Statement, ...]], engine: Literal["sqlite", "postgresql"]) -> list[str]:
    """A migration's statements as `engine` runs them."""
    found: list[str] = []
    for item in migration[2]:
        if isinstance(item, Each):
            chosen = item.sqlite if engine == "sqlite" else item.postgresql
            if chosen is not None:
                found.append(chosen)
        else:
            found.append(item if engine == "sqlite" else postgresql_ddl(item))
    return found


def wake_trace_rows(dialect: Dialect, where: str) -> tuple[str, str]:
    """The wake_traces and wake_event_types rows of the wakes whose events match `where`, made from those events
    (migration 27 for every wake; retention for a wake it compacted; `where` names columns of `events e`)."""
    kind = dialect.json_text("e.payload", "spanKind")
    traces = (
        "INSERT INTO wake_traces (wake_id, session_id, started_at, updated_at, event_count, tool_events, last_seq, "
        "latest_summary) SELECT e.wake_id, min(e.session_id), min(e.created_at), max(e.created_at), count(*), "
        f"sum(CASE WHEN e.type IN ('span.started', 'span.completed') AND {kind} = 'tool' THEN 1 ELSE 0 END), "
        "max(e.seq), (SELECT s.summary FROM events s WHERE s.wake_id = e.wake_id AND s.summary IS NOT NULL "
        f"ORDER BY s.seq DESC LIMIT 1) FROM events e WHERE e.wake_id IS NOT NULL AND {where} GROUP BY e.wake_id"
    )
    types = (
        "INSERT INTO wake_event_types (wake_id, type, first_seq) SELECT e.wake_id, e.type, min(e.seq) FROM events e "
        f"WHERE e.wake_id IS NOT NULL AND {where} GROUP BY e.wake_id, e.type"
    )
    return traces, types


_TRACES = {dialect: wake_trace_rows(dialect, "1 = 1") for dialect in (SQLITE, POSTGRESQL)}

MIGRATIONS: tuple[tuple[int, str, tuple[Statement, ...]], ...] = (
    *MIGRATIONS_1_3,
    *MIGRATIONS_4_10,
    (
        11,
        "sessions owned by a principal",
        (
            # Who a session belongs to within its agent: '' is the local principal (stdio, the static token), an
            # OAuth principal is its issuer and subject (server/auth/principal.py). It never changes after creation.
            "ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT ''",
            "CREATE INDEX sessions_owner ON sessions(agent_id, owner, last_activity_at)",
            # The event index's `agent` token carries the owner too, so a search stays inside the principal's
            # sessions in the index. The local principal's token is unchanged (hex of the agent), so the events
            # already indexed keep theirs and nothing is re-indexed.
            Each("DROP VIEW event_search_docs", None),
            Each(
                """CREATE VIEW event_search_docs AS SELECT e.seq AS seq,
                hex(CASE WHEN s.owner = '' THEN s.agent_id ELSE s.agent_id || char(10) || s.owner END) AS agent,
                hex(e.session_id) AS session, hex(e.type) AS type,
                trim(coalesce(e.summary, '') || ' ' || coalesce((SELECT group_concat(j.value, ' ')
                    FROM json_tree(e.payload) AS j WHERE j.type = 'text'
                    AND j.key NOT IN ('spanId', 'spanKind', 'argsDigest', 'requestId')), '')) AS body
                FROM events e JOIN sessions s ON s.id = e.session_id
                WHERE NOT (e.type IN ('span.started', 'span.completed') AND json_extract(e.payload, '$.toolName')
                    IN ('session_search_context', 'session_search_traces', 'retrieval_search', 'memory_search'))""",
                None,
            ),
            # PostgreSQL: the store's event index rows carry the session's owner as a column of their own (every
            # session before this migration is the local principal's, so '' is right for the rows already there).
            Each(None, "ALTER TABLE event_search ADD COLUMN owner TEXT NOT NULL DEFAULT ''"),
            Each(None, "DROP INDEX event_search_agent"),
            Each(None, "CREATE INDEX event_search_agent ON event_search(agent_id, owner, seq)"),
        ),
    ),
    (
        12,
        "the agent's encrypted vault and the variables a session was given",
        (
            # AES-256-GCM: a random nonce per value, the agent and name bound as associated data; the key is never
            # here (stores/vault_key.py), only the id of the key that sealed each value.
            """CREATE TABLE vault_secrets (
                agent_id TEXT NOT NULL,
                name TEXT NOT NULL,
                nonce BLOB NOT NULL,
                ciphertext BLOB NOT NULL,
                key_id TEXT NOT NULL,
                set_at TEXT NOT NULL,
                PRIMARY KEY (agent_id, name)
            )""",
            # Text values a person gave in a session (never secrets: those go to the vault).
            """CREATE TABLE session_variables (
                session_id TEXT NOT NULL REFERENCES sessions(id),
                name TEXT NOT NULL,
                value TEXT NOT NULL,
                set_at TEXT NOT NULL,
                PRIMARY KEY (session_id, name)
            )""",
        ),
    ),
    (
        13,
        "change notices between the server processes sharing this store",
        (
            # SQLite: a short log that every process polls (stores/notices/__init__.py): a resource one process changed
            # is notified to the subscribers of every other. Pruned to the newest rows; nothing here outlives a poll or
            # two. PostgreSQL needs no table: LISTEN/NOTIFY carries the notices (stores/notices/postgres.py).
            Each(
                """CREATE TABLE notices (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                origin TEXT NOT NULL,
                method TEXT NOT NULL,
                uri TEXT
            )""",
                None,
            ),
        ),
    ),
    (
        14,
        "an approval a person gave for the rest of the session",
        # once: the request runs once (then consumed); session: that exact call (its digest) runs again unasked in
        # the same session until an interrupt revokes it.
        ("ALTER TABLE approvals ADD COLUMN remember TEXT NOT NULL DEFAULT 'once'",),
    ),
    (
        15,
        "events no longer touch their session by trigger",
        # The store moves the session's activity clock itself (stores.events.append_event), so a tool call's two
        # events update `sessions` and its two indexes once, not twice.
        (
            Each("DROP TRIGGER events_touch_session", "DROP TRIGGER events_touch_session ON events"),
            Each(None, "DROP FUNCTION events_touch_session()"),
        ),
    ),
    (
        16,
        "the event index filled in batches, off the append path",
        # SQLite: the insert trigger indexed each event in its appending statement, doubling the append. Now a
        # call's record indexes the events past the mark once INDEX_BATCH of them wait (stores.event_search), and
        # a search reads the unindexed tail itself, so it never misses one. Every event before this was indexed.
        (
            Each("DROP TRIGGER events_fts_ai", None),
            Each("CREATE TABLE events_fts_mark (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL)", None),
            Each("INSERT INTO events_fts_mark (id, seq) SELECT 1, coalesce(max(seq), 0) FROM events", None),
        ),
    ),
    (
        17,
        "how a child session was delegated: its name, whether it takes further messages, how it reports back",
        (
            # One row per child made by session_delegate (seed 000 §4-6); sessions made otherwise have none.
            """CREATE TABLE delegations (
                child_session_id TEXT PRIMARY KEY REFERENCES sessions(id),
                parent_session_id TEXT NOT NULL REFERENCES sessions(id),
                name TEXT NOT NULL,
                resumable INTEGER NOT NULL,
                parent_communication TEXT NOT NULL CHECK (parent_communication IN ('implicit','explicit')),
                created_at TEXT NOT NULL
            )""",
            "CREATE INDEX delegations_parent ON delegations(parent_session_id)",
        ),
    ),
    (
        19,
        "wake requests: a session asks to be woken later",
        (
            # Not the `wakes` table (one row per connection attached to a session): a request, made by a session, to
            # be woken at `due_at` (stores/wake_requests.py). queued -> running (a headless run) -> fired | failed, or
            # queued -> due (no model provider: waits for a client) -> offered (to the next connection, `offered_to`);
            # queued or due -> cancelled.
            """CREATE TABLE wake_requests (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                reason TEXT NOT NULL,
                priority TEXT NOT NULL CHECK (priority IN ('low','normal','high')),
                due_at TEXT NOT NULL,
                status TEXT NOT NULL
                    CHECK (status IN ('queued','running','due','offered','fired','failed','cancelled')),
                requested_in TEXT,
                offered_to TEXT,
                result TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            "CREATE INDEX wake_requests_due ON wake_requests(status, due_at)",
            "CREATE INDEX wake_requests_session ON wake_requests(session_id, status, due_at)",
        ),
    ),
    (
        20,
        "tasks: long tool calls a 2026-07-28 client follows by id (the io.modelcontextprotocol/tasks extension)",
        (
            # One row per task (stores/tasks.py), written before the CreateTaskResult is sent, so a tasks/get always
            # finds it, from any process. `reply` is the final CallToolResult (JSON) once completed, `error` the
            # JSON-RPC error once failed.
            """CREATE TABLE tasks (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                tool_name TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('working','completed','failed','cancelled')),
                status_message TEXT,
                reply TEXT,
                error TEXT,
                ttl_ms INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            "CREATE INDEX tasks_session ON tasks(session_id, created_at)",
        ),
    ),
    (
        22,
        "where each memory and substrate version's content came from (stores/provenance.py)",
        # A JSON list of sources (kind, name, trust); '[]' for versions written before it was kept.
        (
            "ALTER TABLE memory_versions ADD COLUMN provenance TEXT NOT NULL DEFAULT '[]'",
            "ALTER TABLE substrate_versions ADD COLUMN provenance TEXT NOT NULL DEFAULT '[]'",
        ),
    ),
    (
        24,
        "what each session has used: calls, tokens and time (the budgets)",
        (
            # Added to as each call's completion is recorded (stores/usage.py); one row per session.
            """CREATE TABLE session_usage (
                session_id TEXT PRIMARY KEY REFERENCES sessions(id),
                calls INTEGER NOT NULL DEFAULT 0,
                tokens INTEGER NOT NULL DEFAULT 0,
                duration_ms REAL NOT NULL DEFAULT 0,
                updated_at TEXT NOT NULL
            )""",
        ),
    ),
    (
        25,
        "the workspace files a command's approval binds",
        # A JSON list of the files the command line names to run, each with its SHA-256 (or absent, or outside),
        # as they stood when the person was asked (tools/shell/binds.py); '[]' for a call that names none. A
        # remembered approval runs again only while they are unchanged; this says which one changed.
        ("ALTER TABLE approvals ADD COLUMN binds TEXT NOT NULL DEFAULT '[]'",),
    ),
    (
        27,
        "what per-call queries read kept as the events are appended; memory versions in commit order, as deltas",
        (
            # The tools whose calls succeeded in each session (stores/events.py keeps it; provenance reads it): the
            # provenance rule asked this of every event of the session on every write (issue 39 F1). A row stays
            # when retention compacts the spans it came from, so an upstream result still taints the session.
            """CREATE TABLE session_tools (
                session_id TEXT NOT NULL REFERENCES sessions(id),
                tool TEXT NOT NULL,
                PRIMARY KEY (session_id, tool)
            )""",
            Each(
                "INSERT INTO session_tools (session_id, tool) SELECT DISTINCT session_id, "
                "json_extract(payload, '$.toolName') FROM events WHERE type = 'span.completed' "
                "AND json_extract(payload, '$.result') = 'success' AND json_extract(payload, '$.toolName') IS NOT NULL",
                "INSERT INTO session_tools (session_id, tool) SELECT DISTINCT session_id, payload::json ->> 'toolName' "
                "FROM events WHERE type = 'span.completed' AND payload::json ->> 'result' = 'success' "
                "AND payload::json ->> 'toolName' IS NOT NULL",
            ),
            # One summary per wake, moved with each appended event (session_list_traces reads it, retention
            # chooses from it): the first and last event's times, how many events and tool span events, the last
            # seq and summary. Its event types, in the order they first appeared, are rows of wake_event_types.
            """CREATE TABLE wake_traces (
                wake_id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                started_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                event_count INTEGER NOT NULL,
                tool_events INTEGER NOT NULL,
                last_seq INTEGER NOT NULL,
                latest_summary TEXT
            )""",
            "CREATE INDEX wake_traces_session ON wake_traces(session_id, last_seq)",
            "CREATE INDEX wake_traces_retained ON wake_traces(updated_at) WHERE tool_events > 0",
            """CREATE TABLE wake_event_types (
                wake_id TEXT NOT NULL,
                type TEXT NOT NULL,
                first_seq INTEGER NOT NULL,
                PRIMARY KEY (wake_id, type)
            )""",
            *(Each(_TRACES[SQLITE][n], _TRACES[POSTGRESQL][n]) for n in (0, 1)),
            # Each session's event and completed tool call counts, moved with each append (a snapshot read them by
            # counting the session's events); its unprocessed events by a partial index, which holds only those.
            """CREATE TABLE session_event_counts (
                session_id TEXT PRIMARY KEY REFERENCES sessions(id),
                events INTEGER NOT NULL,
                tool_calls INTEGER NOT NULL
            )""",
            Each(
                "INSERT INTO session_event_counts (session_id, events, tool_calls) SELECT session_id, count(*), "
                "sum(CASE WHEN type = 'span.completed' AND json_extract(payload, '$.spanKind') = 'tool' THEN 1 "
                "ELSE 0 END) FROM events GROUP BY session_id",
                "INSERT INTO session_event_counts (session_id, events, tool_calls) SELECT session_id, count(*), "
                "sum(CASE WHEN type = 'span.completed' AND payload::json ->> 'spanKind' = 'tool' THEN 1 ELSE 0 END) "
                "FROM events GROUP BY session_id",
            ),
            "CREATE INDEX events_pending ON events(session_id, seq) WHERE processed = 0",
            # Memory versions in the order they were committed: each takes its document's last seq plus one in
            # the write transaction that also checks the expected version, so no clock orders them (issue 39
            # F6). The versions already there take the order they were listed in.
            "ALTER TABLE memory_versions ADD COLUMN seq INTEGER",
            "UPDATE memory_versions SET seq = ranked.n FROM (SELECT id, row_number() OVER (PARTITION BY scope, "
            "target ORDER BY created_at, id) AS n FROM memory_versions) AS ranked WHERE ranked.id = memory_versions.id",
            "CREATE UNIQUE INDEX memory_versions_seq ON memory_versions(scope, target, seq)",
            # A version may keep only what it changed (issue 39 F14): `base_id` names the version it is a delta
            # of, `base_keep` how many leading characters of that version's content it keeps; `content` is then
            # the text after them; `depth` how many deltas lie between it and a whole version (bounded, so a read
            # rebuilds from a few rows). NULL base_id: `content` is the whole text (every version before this one).
            "ALTER TABLE memory_versions ADD COLUMN base_id TEXT",
            "ALTER TABLE memory_versions ADD COLUMN base_keep INTEGER",
            "ALTER TABLE memory_versions ADD COLUMN depth INTEGER NOT NULL DEFAULT 0",
        ),
    ),
    (
        29,
        "learnings a person can correct: superseded, forgotten and restored, with the history of each change",
        (
            # A learning's state now (active | superseded | forgotten) and the one it replaces; every change to a
            # state is a row of learning_changes, never an edit, so the history keeps what was hidden and why.
            "ALTER TABLE learnings ADD COLUMN state TEXT NOT NULL DEFAULT 'active'",
            "ALTER TABLE learnings ADD COLUMN supersedes TEXT",
            """CREATE TABLE learning_changes (
                id TEXT PRIMARY KEY,
                learning_id TEXT NOT NULL REFERENCES learnings(id),
                agent_id TEXT NOT NULL,
                session_id TEXT,
                action TEXT NOT NULL CHECK (action IN ('supersede','forget','restore')),
                replacement_id TEXT,
                reason TEXT,
                created_at TEXT NOT NULL
            )""",
            "CREATE INDEX learning_changes_learning ON learning_changes(learning_id, created_at)",
        ),
    ),
    (
        30,
        "where each learning came from (stores/provenance.py), as memory and substrate versions already say",
        # A JSON list of sources, as memory_versions.provenance; '[]' (trusted, not recorded) for those before it.
        # An imported learning names its file and line (`managed-tools memory import`, docs/memory-carry.md).
        ("ALTER TABLE learnings ADD COLUMN provenance TEXT NOT NULL DEFAULT '[]'",),
    ),
)
