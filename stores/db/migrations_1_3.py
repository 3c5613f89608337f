"""Schema migrations 1 to 3: sessions, wakes and events; permission requests; memory, learnings, outcomes, plans
and the search index. Shipped: never edited (stores/db/migrations.py runs them, in order, with the rest)."""

from managed_tools.stores.db.dialect import Each, Statement

MIGRATIONS_1_3: tuple[tuple[int, str, tuple[Statement, ...]], ...] = (
    (
        1,
        "sessions, wakes and events",
        (
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                agent_id TEXT NOT NULL,
                parent_id TEXT REFERENCES sessions(id),
                title TEXT,
                status TEXT NOT NULL DEFAULT 'idle'
                    CHECK (status IN ('idle','running','requires_action','terminated')),
                stop_reason TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                last_activity_at TEXT NOT NULL
            )""",
            "CREATE INDEX sessions_agent ON sessions(agent_id, last_activity_at)",
            "CREATE INDEX sessions_parent ON sessions(parent_id)",
            """CREATE TABLE wakes (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                started_at TEXT NOT NULL,
                ended_at TEXT,
                transport TEXT NOT NULL,
                pid INTEGER NOT NULL,
                setup_fingerprint TEXT NOT NULL
            )""",
            "CREATE INDEX wakes_session ON wakes(session_id, started_at)",
            """CREATE TABLE events (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                wake_id TEXT REFERENCES wakes(id),
                type TEXT NOT NULL,
                created_at TEXT NOT NULL,
                processed INTEGER NOT NULL DEFAULT 1,
                summary TEXT,
                payload TEXT NOT NULL DEFAULT '{}'
            )""",
            "CREATE INDEX events_session ON events(session_id, seq)",
            "CREATE INDEX events_wake ON events(wake_id, seq)",
            "CREATE INDEX events_type ON events(session_id, type, seq)",
            # Every event is activity: the session's clock moves in the same statement as the append.
            Each(
                """CREATE TRIGGER events_touch_session AFTER INSERT ON events BEGIN
                UPDATE sessions SET last_activity_at = NEW.created_at, updated_at = NEW.created_at
                WHERE id = NEW.session_id;
            END""",
                """CREATE FUNCTION events_touch_session() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                UPDATE sessions SET last_activity_at = NEW.created_at, updated_at = NEW.created_at
                WHERE id = NEW.session_id;
                RETURN NULL;
            END $$""",
            ),
            Each(
                None,
                "CREATE TRIGGER events_touch_session AFTER INSERT ON events FOR EACH ROW "
                "EXECUTE FUNCTION events_touch_session()",
            ),
        ),
    ),
    (
        2,
        "permission requests",
        (
            """CREATE TABLE approvals (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                kind TEXT NOT NULL CHECK (kind IN ('tool_confirmation','custom_tool')),
                tool_name TEXT NOT NULL,
                arguments TEXT NOT NULL,
                args_digest TEXT NOT NULL,
                channel TEXT NOT NULL CHECK (channel IN ('elicitation','input_required','out_of_band')),
                status TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending','approved','denied','consumed','cleared')),
                requested_at TEXT NOT NULL,
                decided_at TEXT,
                decided_by TEXT,
                note TEXT,
                response TEXT,
                consumed_at TEXT
            )""",
            "CREATE INDEX approvals_lookup ON approvals(session_id, tool_name, args_digest, status)",
            "CREATE INDEX approvals_status ON approvals(status, requested_at)",
        ),
    ),
    (
        3,
        "memory, learnings, outcomes, plans and the search index",
        (
            # The current content of every writable memory document; `scope` is a session id or "agent:<id>".
            """CREATE TABLE memory_documents (
                scope TEXT NOT NULL,
                target TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                session_id TEXT REFERENCES sessions(id),
                content TEXT NOT NULL,
                content_hash TEXT NOT NULL,
                version_id TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (scope, target)
            )""",
            # Every write is an immutable version; the newest is the document's current content.
            """CREATE TABLE memory_versions (
                id TEXT PRIMARY KEY,
                scope TEXT NOT NULL,
                target TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                session_id TEXT,
                wake_id TEXT,
                created_at TEXT NOT NULL,
                source TEXT NOT NULL,
                mode TEXT NOT NULL,
                content_hash TEXT NOT NULL,
                size_bytes INTEGER NOT NULL,
                preview TEXT NOT NULL,
                content TEXT NOT NULL
            )""",
            "CREATE INDEX memory_versions_doc ON memory_versions(scope, target, created_at DESC, id DESC)",
            """CREATE TABLE learnings (
                id TEXT PRIMARY KEY,
                agent_id TEXT NOT NULL,
                session_id TEXT,
                kind TEXT NOT NULL CHECK (kind IN ('lesson','correction','error')),
                title TEXT NOT NULL,
                detail TEXT NOT NULL,
                promote_to_memory INTEGER NOT NULL,
                created_at TEXT NOT NULL
            )""",
            "CREATE INDEX learnings_agent ON learnings(agent_id, created_at)",
            """CREATE TABLE outcomes (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                title TEXT NOT NULL,
                detail TEXT,
                criteria TEXT NOT NULL,
                fingerprint TEXT NOT NULL,
                defined_at TEXT NOT NULL
            )""",
            "CREATE INDEX outcomes_session ON outcomes(session_id, defined_at)",
            """CREATE TABLE outcome_evaluations (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                wake_id TEXT,
                fingerprint TEXT NOT NULL,
                iteration INTEGER NOT NULL,
                evaluated_at TEXT NOT NULL,
                outcome_title TEXT NOT NULL,
                grade_status TEXT NOT NULL,
                evaluation TEXT NOT NULL
            )""",
            "CREATE INDEX outcome_evaluations_session ON outcome_evaluations(session_id, evaluated_at)",
            """CREATE TABLE plans (
                session_id TEXT PRIMARY KEY REFERENCES sessions(id),
                objective TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('active','completed')),
                next_step_id INTEGER NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            """CREATE TABLE plan_steps (
                session_id TEXT NOT NULL REFERENCES plans(session_id),
                step_id INTEGER NOT NULL,
                title TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending','in_progress','done')),
                PRIMARY KEY (session_id, step_id)
            )""",
            # The search index: one row per searchable text, keyed so a rewrite replaces it; FTS5 over `body` on
            # SQLite. On PostgreSQL the row also holds its token count (bm25) and its distinct words (a GIN-indexed
            # tsvector without positions: phrases and scores are then checked on the text, stores.db.fulltext).
            Each(
                """CREATE TABLE search_docs (
                id INTEGER PRIMARY KEY,
                key TEXT NOT NULL UNIQUE,
                source TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                session_id TEXT,
                title TEXT NOT NULL,
                created_at TEXT NOT NULL,
                body TEXT NOT NULL
            )""",
                """CREATE TABLE search_docs (
                id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                key TEXT NOT NULL UNIQUE,
                source TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                session_id TEXT,
                title TEXT NOT NULL,
                created_at TEXT NOT NULL,
                body TEXT NOT NULL,
                tokens BIGINT NOT NULL,
                words tsvector NOT NULL
            )""",
            ),
            "CREATE INDEX search_docs_agent ON search_docs(agent_id)",
            Each(None, "CREATE INDEX search_docs_words ON search_docs USING gin(words)"),
            Each("CREATE VIRTUAL TABLE search_fts USING fts5(body, content='search_docs', content_rowid='id')", None),
            Each(
                """CREATE TRIGGER search_docs_ai AFTER INSERT ON search_docs BEGIN
                INSERT INTO search_fts(rowid, body) VALUES (new.id, new.body);
            END""",
                None,
            ),
            Each(
                """CREATE TRIGGER search_docs_ad AFTER DELETE ON search_docs BEGIN
                INSERT INTO search_fts(search_fts, rowid, body) VALUES ('delete', old.id, old.body);
            END""",
                None,
            ),
            Each(
                """CREATE TRIGGER search_docs_au AFTER UPDATE ON search_docs BEGIN
                INSERT INTO search_fts(search_fts, rowid, body) VALUES ('delete', old.id, old.body);
                INSERT INTO search_fts(rowid, body) VALUES (new.id, new.body);
            END""",
                None,
            ),
        ),
    ),
)
