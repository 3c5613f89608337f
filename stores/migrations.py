"""Numbered schema migrations, applied in order at start-up (see `stores.db._migrate`).

Append new migrations; never edit one that has shipped.
"""

MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
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
            """CREATE TRIGGER events_touch_session AFTER INSERT ON events BEGIN
                UPDATE sessions SET last_activity_at = NEW.created_at, updated_at = NEW.created_at
                WHERE id = NEW.session_id;
            END""",
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
            # The search index: one row per searchable text, keyed so a rewrite replaces it; FTS5 over `body`.
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
            "CREATE INDEX search_docs_agent ON search_docs(agent_id)",
            "CREATE VIRTUAL TABLE search_fts USING fts5(body, content='search_docs', content_rowid='id')",
            """CREATE TRIGGER search_docs_ai AFTER INSERT ON search_docs BEGIN
                INSERT INTO search_fts(rowid, body) VALUES (new.id, new.body);
            END""",
            """CREATE TRIGGER search_docs_ad AFTER DELETE ON search_docs BEGIN
                INSERT INTO search_fts(search_fts, rowid, body) VALUES ('delete', old.id, old.body);
            END""",
            """CREATE TRIGGER search_docs_au AFTER UPDATE ON search_docs BEGIN
                INSERT INTO search_fts(search_fts, rowid, body) VALUES ('delete', old.id, old.body);
                INSERT INTO search_fts(rowid, body) VALUES (new.id, new.body);
            END""",
        ),
    ),
    (
        4,
        "substrate versions and staged drafts",
        (
            # Every promotion or restore of a substrate file, with the full text written; `seq` orders versions
            # of one file exactly (writes are serialised by BEGIN IMMEDIATE), which UUIDv7 alone cannot within
            # one millisecond.
            """CREATE TABLE substrate_versions (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                agent_id TEXT NOT NULL,
                session_id TEXT,
                wake_id TEXT,
                source_path TEXT NOT NULL,
                target_path TEXT NOT NULL,
                created_at TEXT NOT NULL,
                content_hash TEXT NOT NULL,
                size_bytes INTEGER NOT NULL,
                preview TEXT NOT NULL,
                restored_from_version_id TEXT,
                content TEXT NOT NULL
            )""",
            "CREATE INDEX substrate_versions_target ON substrate_versions(agent_id, target_path, seq)",
            # The staging manifest: which workspace draft came from which substrate file, and their hashes then.
            """CREATE TABLE staged_drafts (
                session_id TEXT NOT NULL REFERENCES sessions(id),
                session_path TEXT NOT NULL,
                source_path TEXT NOT NULL,
                source_content_hash TEXT NOT NULL,
                target_content_hash TEXT NOT NULL,
                staged_at TEXT NOT NULL,
                PRIMARY KEY (session_id, session_path)
            )""",
        ),
    ),
    (
        5,
        "durable shell state and command history",
        (
            # One row a session: the shell hand's cwd and env (set by shell_set_cwd / shell_set_env) and the
            # persistent shell's last known metadata (JSON), so another process can describe what this one did.
            """CREATE TABLE shell_states (
                session_id TEXT PRIMARY KEY REFERENCES sessions(id),
                cwd TEXT NOT NULL,
                env TEXT NOT NULL DEFAULT '{}',
                shell TEXT,
                updated_at TEXT NOT NULL
            )""",
            """CREATE TABLE shell_commands (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                kind TEXT NOT NULL CHECK (kind IN ('bash','shell','persistent-shell')),
                command TEXT NOT NULL,
                args TEXT NOT NULL DEFAULT '[]',
                cwd TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('running','completed','timed_out','killed','lost')),
                exit_code INTEGER,
                duration_ms REAL,
                started_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                stdout TEXT NOT NULL DEFAULT '',
                stderr TEXT NOT NULL DEFAULT '',
                truncated INTEGER NOT NULL DEFAULT 0,
                owner_pid INTEGER NOT NULL,
                UNIQUE (session_id, id)
            )""",
            "CREATE INDEX shell_commands_session ON shell_commands(session_id, seq)",
        ),
    ),
    (
        6,
        "the question a person was shown for each permission request",
        ("ALTER TABLE approvals ADD COLUMN question TEXT NOT NULL DEFAULT ''",),
    ),
    (
        7,
        "the agent setup contract each wake ran under, and the size of each tool result",
        (
            """CREATE TABLE agent_setups (
                agent_id TEXT NOT NULL,
                fingerprint TEXT NOT NULL,
                contract TEXT NOT NULL,
                recorded_at TEXT NOT NULL,
                PRIMARY KEY (agent_id, fingerprint)
            )""",
            # What each tool result put into the conversation, per wake and largest first (session_describe_context).
            "CREATE INDEX events_result_chars ON events(wake_id, json_extract(payload, '$.resultChars')) "
            "WHERE type = 'span.completed'",
        ),
    ),
    (
        8,
        "the full-text index of events",
        (
            # What is searchable in an event: its summary and the string leaves of its payload (tool names, the
            # argument previews, errors, bounded result summaries, outcome titles and criteria, decision notes),
            # without ids and digests that would only bloat the index. The agent, session and type are indexed as
            # hex tokens so a search filters on them inside the index. A search tool's own spans are left out:
            # a query is not evidence of work, and would outrank the work it looks for.
            """CREATE VIEW event_search_docs AS SELECT e.seq AS seq, hex(s.agent_id) AS agent,
                hex(e.session_id) AS session, hex(e.type) AS type,
                trim(coalesce(e.summary, '') || ' ' || coalesce((SELECT group_concat(j.value, ' ')
                    FROM json_tree(e.payload) AS j WHERE j.type = 'text'
                    AND j.key NOT IN ('spanId', 'spanKind', 'argsDigest', 'requestId')), '')) AS body
                FROM events e JOIN sessions s ON s.id = e.session_id
                WHERE NOT (e.type IN ('span.started', 'span.completed') AND json_extract(e.payload, '$.toolName')
                    IN ('session_search_context', 'session_search_traces', 'retrieval_search', 'memory_search'))""",
            # External content: the text lives once, in events; the index holds only the tokens. Events are
            # append-only, so an insert trigger keeps it current in the appending transaction.
            "CREATE VIRTUAL TABLE events_fts USING fts5(agent, session, type, body, content='event_search_docs', "
            "content_rowid='seq')",
            """CREATE TRIGGER events_fts_ai AFTER INSERT ON events BEGIN
                INSERT INTO events_fts(rowid, agent, session, type, body)
                SELECT seq, agent, session, type, body FROM event_search_docs WHERE seq = NEW.seq;
            END""",
            # Databases from before this migration: index the events they already hold.
            "INSERT INTO events_fts(rowid, agent, session, type, body) "
            "SELECT seq, agent, session, type, body FROM event_search_docs",
        ),
    ),
    (
        9,
        "latent calls handed back to the calling model",
        (
            # A latent tool called where the server cannot sample (seed 003): the call waits here for the model's
            # answer, bound to the session that made it; `output` is set once, when a valid answer is handed back.
            """CREATE TABLE latent_calls (
                call_id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                tool_name TEXT NOT NULL,
                span_id TEXT NOT NULL,
                arguments TEXT NOT NULL,
                output TEXT,
                created_at TEXT NOT NULL,
                completed_at TEXT
            )""",
        ),
    ),
    (
        10,
        "attachments tool results carry",
        (
            # The file lives at <data dir>/attachments/<session_id>/<id> (stores/attachments.py); the row says what
            # it is and whose. The caps on a session's count and bytes are read through the index.
            """CREATE TABLE attachments (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                name TEXT NOT NULL,
                mime_type TEXT NOT NULL,
                size INTEGER NOT NULL,
                width INTEGER,
                height INTEGER,
                sha256 TEXT NOT NULL,
                created_at TEXT NOT NULL
            )""",
            "CREATE INDEX attachments_session ON attachments(session_id, size)",
        ),
    ),
    (
        11,
        "sessions owned by a principal",
        (
            # Who a session belongs to within its agent: '' is the local principal (stdio, the static token), an
            # OAuth principal is its issuer and subject (server/principal.py). It never changes after creation.
            "ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT ''",
            "CREATE INDEX sessions_owner ON sessions(agent_id, owner, last_activity_at)",
            # The event index's `agent` token carries the owner too, so a search stays inside the principal's
            # sessions in the index. The local principal's token is unchanged (hex of the agent), so the events
            # already indexed keep theirs and nothing is re-indexed.
            "DROP VIEW event_search_docs",
            """CREATE VIEW event_search_docs AS SELECT e.seq AS seq,
                hex(CASE WHEN s.owner = '' THEN s.agent_id ELSE s.agent_id || char(10) || s.owner END) AS agent,
                hex(e.session_id) AS session, hex(e.type) AS type,
                trim(coalesce(e.summary, '') || ' ' || coalesce((SELECT group_concat(j.value, ' ')
                    FROM json_tree(e.payload) AS j WHERE j.type = 'text'
                    AND j.key NOT IN ('spanId', 'spanKind', 'argsDigest', 'requestId')), '')) AS body
                FROM events e JOIN sessions s ON s.id = e.session_id
                WHERE NOT (e.type IN ('span.started', 'span.completed') AND json_extract(e.payload, '$.toolName')
                    IN ('session_search_context', 'session_search_traces', 'retrieval_search', 'memory_search'))""",
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
            # A short log that every process polls (stores/notices.py): a resource one process changed is notified
            # to the subscribers of every other. Pruned to the newest rows; nothing here outlives a poll or two.
            """CREATE TABLE notices (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                origin TEXT NOT NULL,
                method TEXT NOT NULL,
                uri TEXT
            )""",
        ),
    ),
)
