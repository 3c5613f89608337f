"""Schema migrations 4 to 10: substrate versions to the attachments tool results carry. Shipped: never edited
(stores/db/migrations.py runs them, in order, with the rest)."""

from managed_tools.stores.db.dialect import Each, Statement

MIGRATIONS_4_10: tuple[tuple[int, str, tuple[Statement, ...]], ...] = (
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
            Each(
                "CREATE INDEX events_result_chars ON events(wake_id, json_extract(payload, '$.resultChars')) "
                "WHERE type = 'span.completed'",
                "CREATE INDEX events_result_chars ON events(wake_id, ((payload::json ->> 'resultChars')::bigint)) "
                "WHERE type = 'span.completed'",
            ),
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
            Each(
                """CREATE VIEW event_search_docs AS SELECT e.seq AS seq, hex(s.agent_id) AS agent,
                    hex(e.session_id) AS session, hex(e.type) AS type,
                    trim(coalesce(e.summary, '') || ' ' || coalesce((SELECT group_concat(j.value, ' ')
                        FROM json_tree(e.payload) AS j WHERE j.type = 'text'
                        AND j.key NOT IN ('spanId', 'spanKind', 'argsDigest', 'requestId')), '')) AS body
                    FROM events e JOIN sessions s ON s.id = e.session_id
                    WHERE NOT (e.type IN ('span.started', 'span.completed') AND json_extract(e.payload, '$.toolName')
                        IN ('session_search_context', 'session_search_traces', 'retrieval_search', 'memory_search'))""",
                None,
            ),
            # External content: the text lives once, in events; the index holds only the tokens. Events are
            # append-only, so an insert trigger keeps it current in the appending transaction.
            Each(
                "CREATE VIRTUAL TABLE events_fts USING fts5(agent, session, type, body, content='event_search_docs', "
                "content_rowid='seq')",
                None,
            ),
            Each(
                """CREATE TRIGGER events_fts_ai AFTER INSERT ON events BEGIN
                    INSERT INTO events_fts(rowid, agent, session, type, body)
                    SELECT seq, agent, session, type, body FROM event_search_docs WHERE seq = NEW.seq;
                END""",
                None,
            ),
            # Databases from before this migration: index the events they already hold.
            Each(
                "INSERT INTO events_fts(rowid, agent, session, type, body) "
                "SELECT seq, agent, session, type, body FROM event_search_docs",
                None,
            ),
            # PostgreSQL: the same text and words in a table the store writes in the appending transaction
            # (stores.db.fulltext: the words FTS5 would see, whatever the server's locale).
            Each(
                None,
                """CREATE TABLE event_search (
                seq BIGINT PRIMARY KEY REFERENCES events(seq),
                agent_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                type TEXT NOT NULL,
                body TEXT NOT NULL,
                words tsvector NOT NULL
            )""",
            ),
            Each(None, "CREATE INDEX event_search_agent ON event_search(agent_id, seq)"),
            Each(None, "CREATE INDEX event_search_words ON event_search USING gin(words)"),
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
)
