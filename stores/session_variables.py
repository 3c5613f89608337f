"""Text values a person gave a session for its tools' variables (secrets never: they live in the vault)."""

from __future__ import annotations

from managed_tools.stores.db import Tx
from managed_tools.stores.ids import utc_now

MAX_VALUE_CHARS = 4096
MAX_DEPTH = 64  # a lineage deeper than this is not walked further


async def set_value(tx: Tx, session_id: str, name: str, value: str) -> None:
    await tx.execute(
        "INSERT INTO session_variables (session_id, name, value, set_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (session_id, name) DO UPDATE SET value = excluded.value, set_at = excluded.set_at",
        (session_id, name, value[:MAX_VALUE_CHARS], utc_now()),
    )


async def lineage_value(tx: Tx, session_id: str, name: str, *, inherited: bool) -> str | None:
    """The value of `name` in the session, else (when `inherited`) in its nearest ancestor that has one."""
    row = await tx.fetchone(
        """WITH RECURSIVE line(id, depth) AS (
               SELECT ?, 0
               UNION ALL
               SELECT s.parent_id, line.depth + 1 FROM sessions s JOIN line ON s.id = line.id
               WHERE s.parent_id IS NOT NULL AND line.depth < ?
           )
           SELECT v.value FROM line JOIN session_variables v ON v.session_id = line.id AND v.name = ?
           ORDER BY line.depth LIMIT 1""",
        (session_id, MAX_DEPTH if inherited else 0, name),
    )
    return None if row is None else str(row["value"])
