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
)
