"""SQLite chat history: conversations and messages with their stats (WAL, one writer)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from chatapp.engine.protocol import ChatMessage
from chatapp.history import branches
from chatapp.history.database import Database, default_db_path
from chatapp.history.records import (
    Conversation,
    Message,
    MessageStatus,
    ModelFingerprint,
    SearchHit,
    StoreError,
    conversation_from_row,
    dumps_sampler,
    hit_from_row,
    message_from_row,
    model_columns,
    model_fingerprint,
    stats_columns,
    title_from,
)
from chatapp.history.schema import SCHEMA_VERSION, pid_alive
from chatapp.metrics import GenerationStats
from chatapp.sampling import SamplerSettings

__all__ = [
    "Conversation",
    "Message",
    "MessageStatus",
    "ModelFingerprint",
    "SCHEMA_VERSION",
    "SearchHit",
    "Store",
    "StoreError",
    "default_db_path",
    "model_fingerprint",
    "title_from",
]

STALE_STREAMING_S = 600.0
"""A 'streaming' row not updated for this long is interrupted even if its writer pid is alive."""


class Store(Database):
    """The chat history: conversations, messages and their branches, searched and resumed.
    Use one instance per process; its methods are thread-safe (history/database.py opens
    the file and runs the transactions).

    Every write is one short `BEGIN IMMEDIATE` transaction, so two chatapp processes share the
    file without "database is locked" (the busy timeout makes the second one wait). A failed
    write raises StoreError and changes nothing: the caller keeps its in-memory conversation.
    """

    # -- conversations ---------------------------------------------------------------------

    def create_conversation(
        self,
        title: str = "New chat",
        *,
        system_prompt: str = "",
        model_path: str = "",
        sampler: SamplerSettings | None = None,
    ) -> int:
        """A new empty conversation; returns its id."""
        now = time.time()
        with self._write("create a conversation") as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, created, updated, system_prompt, model_path, "
                "sampler) VALUES (?, ?, ?, ?, ?, ?)",
                (title, now, now, system_prompt, model_path, dumps_sampler(sampler)),
            )
            return int(cur.lastrowid or 0)

    def list_conversations(self, limit: int | None = None) -> list[Conversation]:
        """Conversations, most recently updated first, with their message counts."""
        with self._read("list conversations") as conn:
            rows = conn.execute(
                "SELECT c.*, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) "
                "AS message_count FROM conversations c ORDER BY c.updated DESC, c.id DESC "
                "LIMIT ?",
                (-1 if limit is None else limit,),
            ).fetchall()
        return [conversation_from_row(r) for r in rows]

    def get_conversation(self, conversation_id: int) -> Conversation:
        """One conversation; StoreError when there is none with that id."""
        with self._read("read a conversation") as conn:
            row = conn.execute(
                "SELECT c.*, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) "
                "AS message_count FROM conversations c WHERE c.id = ?",
                (conversation_id,),
            ).fetchone()
        if row is None:
            raise StoreError(f"no conversation with id {conversation_id}")
        return conversation_from_row(row)

    def update_conversation(
        self,
        conversation_id: int,
        *,
        title: str | None = None,
        system_prompt: str | None = None,
        model_path: str | None = None,
        sampler: SamplerSettings | None = None,
    ) -> None:
        """Change some fields of a conversation (None leaves a field as it is)."""
        changes: dict[str, Any] = {"updated": time.time()}
        if title is not None:
            changes["title"] = title
        if system_prompt is not None:
            changes["system_prompt"] = system_prompt
        if model_path is not None:
            changes["model_path"] = model_path
        if sampler is not None:
            changes["sampler"] = dumps_sampler(sampler)
        sets = ", ".join(f"{name} = ?" for name in changes)
        with self._write("update a conversation") as conn:
            values = (*changes.values(), conversation_id)
            cur = conn.execute(f"UPDATE conversations SET {sets} WHERE id = ?", values)
            if cur.rowcount == 0:
                raise StoreError(f"no conversation with id {conversation_id}")

    def rename(self, conversation_id: int, title: str) -> None:
        """Set a conversation's title."""
        title = title.strip()
        if not title:
            raise StoreError("a conversation title cannot be empty")
        self.update_conversation(conversation_id, title=title)

    def delete(self, conversation_id: int) -> None:
        """Delete a conversation and all its messages."""
        with self._write("delete a conversation") as conn:
            cur = conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            if cur.rowcount == 0:
                raise StoreError(f"no conversation with id {conversation_id}")

    def delete_messages(self, message_ids: list[int]) -> None:
        """Delete some messages (a reply that was regenerated, a turn that was edited)."""
        if not message_ids:
            return
        marks = ", ".join("?" for _ in message_ids)
        with self._write("delete messages") as conn:
            conn.execute(f"DELETE FROM messages WHERE id IN ({marks})", tuple(message_ids))

    def search(self, text: str, limit: int = 100) -> list[SearchHit]:
        """Titles, then messages, containing `text` (case-insensitive for ASCII), newest first.

        A LIKE scan: about 70 ms over 100,000 messages when nothing matches.
        """
        needle = text.strip()
        if not needle:
            return []
        pattern = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with self._read("search the history") as conn:
            # newest first by id, so SQLite stops scanning once `limit` messages matched
            rows = conn.execute(
                "SELECT NULL AS message_id, id AS conversation_id, title, '' AS role, "
                "title AS text, updated AS created FROM conversations "
                "WHERE title LIKE ? ESCAPE '\\' ORDER BY updated DESC LIMIT ?",
                (pattern, limit),
            ).fetchall()
            rows += conn.execute(
                "SELECT m.id AS message_id, m.conversation_id, c.title, m.role, m.text, "
                "m.created FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                "WHERE m.text LIKE ? ESCAPE '\\' ORDER BY m.id DESC LIMIT ?",
                (pattern, limit),
            ).fetchall()
        return [hit_from_row(r, needle) for r in rows]

    # -- messages --------------------------------------------------------------------------

    def add_message(
        self,
        conversation_id: int,
        role: str,
        text: str,
        *,
        status: MessageStatus | str = MessageStatus.COMPLETE,
        model: ModelFingerprint | None = None,
        sampler: SamplerSettings | None = None,
        parent_id: int | None = None,
        attachments: list[dict] | tuple[dict, ...] = (),
        steering: dict | None = None,
    ) -> int:
        """Append a message (save the user turn before generating); returns its id.
        `attachments`: the files in a user message (Message.attachments); `steering`: the
        control vectors of a reply (Message.steering).

        It follows `parent_id`, or (None) the last message of the chosen path; a message that
        already has followers gets a new branch, and the new message is the chosen one.
        """
        if role not in ("system", "user", "assistant"):
            raise StoreError(f"role must be system, user or assistant, got {role!r}")
        status = MessageStatus(status)
        now = time.time()
        pid = os.getpid() if status is MessageStatus.STREAMING else None
        with self._write("save a message") as conn:
            cur = conn.execute(
                "UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id)
            )
            if cur.rowcount == 0:
                raise StoreError(f"no conversation with id {conversation_id}")
            if parent_id is None:
                parent_id = branches.last_of_path(conn, conversation_id)
            elif not branches.parent_in(conn, conversation_id, parent_id):
                raise StoreError(f"conversation {conversation_id} has no message {parent_id}")
            cur = conn.execute(
                "INSERT INTO messages (conversation_id, seq, role, text, created, updated, "
                "status, writer_pid, model_path, model_size, model_quant, model_sha256, sampler, "
                "parent_id, attachments, steering) VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 "
                "FROM messages WHERE conversation_id = ?), "
                "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, conversation_id, role, text, now, now, status.value, pid)
                + model_columns(model)
                + (
                    dumps_sampler(sampler),
                    parent_id,
                    json.dumps(list(attachments)) if attachments else None,
                    _json_or_none(steering),
                ),
            )
            message_id = int(cur.lastrowid or 0)
            branches.choose(conn, message_id)
            return message_id

    def begin_reply(
        self,
        conversation_id: int,
        *,
        model: ModelFingerprint | None = None,
        sampler: SamplerSettings | None = None,
        parent_id: int | None = None,
        steering: dict | None = None,
    ) -> int:
        """Create the assistant row with status 'streaming' (before the first token); it
        follows `parent_id` (a new branch if that message has a reply already), or the last
        message of the chosen path."""
        return self.add_message(
            conversation_id,
            "assistant",
            "",
            status=MessageStatus.STREAMING,
            model=model,
            sampler=sampler,
            parent_id=parent_id,
            steering=steering,
        )

    def choose_branch(self, message_id: int) -> None:
        """Go on with this message's branch: the path through its siblings passes here."""
        with self._write("switch branches") as conn:
            if not branches.choose(conn, message_id):
                raise StoreError(f"no message with id {message_id} (was it deleted?)")

    def update_reply(self, message_id: int, text: str) -> None:
        """Save the reply so far (one small UPDATE; call it about once a second)."""
        with self._write("save the reply") as conn:
            cur = conn.execute(
                "UPDATE messages SET text = ?, updated = ? WHERE id = ?",
                (text, time.time(), message_id),
            )
            if cur.rowcount == 0:
                raise StoreError(f"no message with id {message_id} (was it deleted?)")

    def finish_reply(
        self,
        message_id: int,
        text: str,
        status: MessageStatus | str = MessageStatus.COMPLETE,
        *,
        stats: GenerationStats | None = None,
        stop_reason: str | None = None,
        error: str | None = None,
        sampler: SamplerSettings | None = None,
        steering: dict | None = None,
    ) -> None:
        """Store the final text, status, stats and stop reason of a reply.

        `sampler` (when given) replaces the settings saved by begin_reply: pass the settings in
        force at the end when they changed during the reply; `steering` likewise (with the
        changes made during the reply).
        """
        status = MessageStatus(status)
        if status is MessageStatus.STREAMING:
            raise StoreError("finish_reply needs a final status, not 'streaming'")
        now = time.time()
        stop = None if stop_reason is None else str(stop_reason)
        with self._write("save the reply") as conn:
            cur = conn.execute(
                "UPDATE messages SET text = ?, status = ?, writer_pid = NULL, updated = ?, "
                "ttft_s = ?, prefill_tps = ?, decode_tps = ?, prompt_tokens = ?, "
                "completion_tokens = ?, stats = ?, stop_reason = ?, error = ?, "
                "sampler = COALESCE(?, sampler), steering = COALESCE(?, steering) WHERE id = ?",
                (text, status.value, now)
                + stats_columns(stats)
                + (stop, error, dumps_sampler(sampler), _json_or_none(steering), message_id),
            )
            if cur.rowcount == 0:
                raise StoreError(f"no message with id {message_id} (was it deleted?)")
            conn.execute(
                "UPDATE conversations SET updated = ? WHERE id = "
                "(SELECT conversation_id FROM messages WHERE id = ?)",
                (now, message_id),
            )

    def mark_interrupted_on_start(self) -> int:
        """Turn 'streaming' rows left by dead processes into 'interrupted'; returns how many.

        A row whose writer process is still alive (another chatapp window) is left alone unless
        it has not been updated for STALE_STREAMING_S.
        """
        now = time.time()
        with self._write("recover interrupted replies") as conn:
            rows = conn.execute(
                "SELECT id, writer_pid, updated FROM messages WHERE status = 'streaming'"
            ).fetchall()
            dead = [
                (r["id"],)
                for r in rows
                if not pid_alive(r["writer_pid"]) or now - r["updated"] > STALE_STREAMING_S
            ]
            conn.executemany(
                "UPDATE messages SET status = 'interrupted', writer_pid = NULL "
                "WHERE id = ? AND status = 'streaming'",
                dead,
            )
        return len(dead)

    def messages(self, conversation_id: int) -> list[Message]:
        """The conversation in order, along its chosen branches (each message says which
        branch it is and how many there are); StoreError when it does not exist."""
        self.get_conversation(conversation_id)
        with self._read("read messages") as conn:
            rows = conn.execute(branches.PATH_MESSAGES, {"cid": conversation_id}).fetchall()
        return [message_from_row(r) for r in rows]

    def all_messages(self, conversation_id: int) -> list[Message]:
        """Every message of a conversation, all branches, in the order they were made (each
        with its parent_id and chosen flag); StoreError when it does not exist."""
        self.get_conversation(conversation_id)
        with self._read("read messages") as conn:
            rows = conn.execute(
                "SELECT * FROM messages WHERE conversation_id = ? ORDER BY seq", (conversation_id,)
            ).fetchall()
        return [message_from_row(r) for r in rows]

    def chat_messages(self, conversation_id: int) -> list[ChatMessage]:
        """The conversation as engine input: system prompt, then user and assistant turns.

        Failed replies and empty ones are left out; interrupted replies keep their partial text.
        """
        system = self.get_conversation(conversation_id).system_prompt
        out = [ChatMessage("system", system)] if system else []
        for m in self.messages(conversation_id):
            if m.status is not MessageStatus.ERROR and m.text:
                out.append(ChatMessage(m.role, m.text))
        return out


def _json_or_none(data: dict | None) -> str | None:
    return None if data is None else json.dumps(data, sort_keys=True)
