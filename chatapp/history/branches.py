"""The SQL of a conversation's branches: the chosen path through the message tree."""

from __future__ import annotations

import sqlite3

PATH = """
WITH RECURSIVE path(id, depth) AS (
    SELECT (SELECT id FROM messages WHERE conversation_id = :cid AND parent_id IS NULL
            ORDER BY chosen DESC, seq DESC LIMIT 1), 0
    UNION ALL
    SELECT (SELECT c.id FROM messages c WHERE c.parent_id = path.id
            ORDER BY c.chosen DESC, c.seq DESC LIMIT 1), path.depth + 1
    FROM path WHERE path.id IS NOT NULL
)
"""
"""The ids of the chosen path: from the first message, each time the chosen child (else the
newest one), until a message has none."""

PATH_MESSAGES = (
    PATH
    + """
SELECT m.*,
    (SELECT COUNT(*) FROM messages s WHERE s.conversation_id = m.conversation_id
        AND s.parent_id IS m.parent_id AND s.seq <= m.seq) AS branch,
    (SELECT COUNT(*) FROM messages s WHERE s.conversation_id = m.conversation_id
        AND s.parent_id IS m.parent_id) AS branches
FROM messages m JOIN path ON m.id = path.id ORDER BY m.seq
"""
)
"""The messages of the chosen path in order, each with its place among its branches."""


def last_of_path(conn: sqlite3.Connection, conversation_id: int) -> int | None:
    """The id of the chosen path's last message (None for an empty conversation)."""
    row = conn.execute(
        PATH + "SELECT id FROM path WHERE id IS NOT NULL ORDER BY depth DESC LIMIT 1",
        {"cid": conversation_id},
    ).fetchone()
    return None if row is None else row[0]


def parent_in(conn: sqlite3.Connection, conversation_id: int, parent_id: int) -> bool:
    """Whether message `parent_id` belongs to the conversation."""
    row = conn.execute("SELECT conversation_id FROM messages WHERE id = ?", (parent_id,)).fetchone()
    return row is not None and row[0] == conversation_id


def choose(conn: sqlite3.Connection, message_id: int) -> bool:
    """Make a message the chosen one among its siblings; False when there is no such message."""
    row = conn.execute(
        "SELECT conversation_id, parent_id FROM messages WHERE id = ?", (message_id,)
    ).fetchone()
    if row is None:
        return False
    conn.execute(
        "UPDATE messages SET chosen = (id = ?) WHERE conversation_id = ? AND parent_id IS ?",
        (message_id, row[0], row[1]),
    )
    return True
