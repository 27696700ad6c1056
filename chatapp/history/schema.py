"""The history database's schema migrations, SQLite error wording and writer-liveness check."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import psutil

MIGRATIONS: list[tuple[str, ...]] = [
    (  # 1: conversations and messages
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '',
            model_path TEXT NOT NULL DEFAULT '',
            sampler TEXT
        )""",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            text TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL,
            updated REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'complete'
                CHECK (status IN ('complete', 'streaming', 'interrupted', 'error')),
            writer_pid INTEGER,
            model_path TEXT,
            model_size INTEGER,
            model_quant TEXT,
            model_sha256 TEXT,
            sampler TEXT,
            ttft_s REAL,
            prefill_tps REAL,
            decode_tps REAL,
            prompt_tokens INTEGER,
            completion_tokens INTEGER,
            stats TEXT,
            stop_reason TEXT,
            error TEXT,
            UNIQUE (conversation_id, seq)
        )""",
        "CREATE INDEX messages_streaming ON messages(status) WHERE status = 'streaming'",
        "CREATE INDEX conversations_updated ON conversations(updated)",
    ),
    (  # 2: branches: each message follows a parent; siblings are branches, one of them chosen
        "ALTER TABLE messages ADD COLUMN parent_id INTEGER "
        "REFERENCES messages(id) ON DELETE CASCADE",
        "ALTER TABLE messages ADD COLUMN chosen INTEGER NOT NULL DEFAULT 1",
        # until now a conversation was a line: each message follows the one before it
        """UPDATE messages SET parent_id = (
            SELECT p.id FROM messages p WHERE p.conversation_id = messages.conversation_id
            AND p.seq < messages.seq ORDER BY p.seq DESC LIMIT 1)""",
        "CREATE INDEX messages_parent ON messages(parent_id)",
    ),
    (  # 3: files attached to a user message: JSON [{name, size_bytes, tokens, text}]
        "ALTER TABLE messages ADD COLUMN attachments TEXT",
    ),
    (  # 4: the control vectors a reply was steered with: JSON (Steering.to_dict)
        "ALTER TABLE messages ADD COLUMN steering TEXT",
    ),
]
"""MIGRATIONS[n] takes a database from schema n to n + 1 (one statement per item)."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema this chatapp writes (PRAGMA user_version)."""

# primary SQLite result codes (sqlite3 exposes them as sqlite_errorcode since Python 3.11)
_BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 6, 8, 10, 11, 13, 14, 26
_READONLY_DBMOVED = _READONLY | (4 << 8)


def set_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch to WAL, retrying: this pragma gets SQLITE_BUSY at once, without the busy handler,
    while another process is opening the same fresh database (seen in 8 of 180 opens)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if code not in (_BUSY, _LOCKED) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema up to SCHEMA_VERSION in one immediate transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # re-read: another process?
        for step in MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not done so already (e.g. disk full)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def describe_error(exc: sqlite3.Error, path: Path, busy_timeout_s: float) -> str:
    """What went wrong with the database, in words (without the failed action)."""
    code = getattr(exc, "sqlite_errorcode", None) or 0
    primary = code & 0xFF
    if code == _READONLY_DBMOVED:
        return f"the history database {path} was moved or deleted while chatapp was running"
    if primary == _FULL:
        return f"the disk is full ({path})"
    if primary == _READONLY:
        return f"the history database {path} is read-only"
    if primary in (_BUSY, _LOCKED):
        return (
            f"the history database {path} stayed locked by another process for more than "
            f"{busy_timeout_s:g} s"
        )
    if primary in (_CORRUPT, _NOTADB):
        return f"{path} is not a valid chatapp history database ({exc})"
    if primary == _CANTOPEN:
        return f"cannot open the history database {path} (is {path.parent} writable?)"
    if primary == _IOERR:
        return f"disk I/O error on the history database {path} ({exc})"
    return f"history database {path}: {exc}"


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this pid runs (a zombie, ended but not yet reaped, counts as
    dead), on every system psutil knows. One it may not look at (another user's) runs."""
    if not pid:
        return False
    if pid == os.getpid():
        return True
    try:
        return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
