"""The chat's link to the history database: saved as the chat goes, never losing what was typed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from chatapp.engine.protocol import Finished, ModelInfo
from chatapp.engine.steering import Steering
from chatapp.history.records import ModelFingerprint, model_fingerprint, title_from
from chatapp.history.store import MessageStatus, Store, StoreError
from chatapp.sampling import SamplerSettings

SAVE_EVERY_S = 1.0  # a streaming reply is written at least this often
T = TypeVar("T")


class ChatHistory:
    """Writes the conversation to a Store. A store error is reported once through `warn`; the
    chat then goes on in memory (the conversation on screen is never lost)."""

    def __init__(self, store: Store | None, warn: Callable[[str], None]) -> None:
        self.store = store
        self.warn = warn
        self.conversation_id: int | None = None
        self.reply_id: int | None = None
        self._last_save = 0.0
        self._fingerprint: ModelFingerprint | None = None
        self._failed = False

    @classmethod
    def open(cls, warn: Callable[[str], None]) -> ChatHistory:
        """Open the default database; if it cannot be opened the app runs without history."""
        try:
            store = Store()
            store.mark_interrupted_on_start()
        except StoreError as exc:
            warn(f"{exc}; this chat will not be saved")
            store = None
        return cls(store, warn)

    def _do(self, what: Callable[[Store], T]) -> T | None:
        """`what` done on the store; None without one, or when it failed (said once)."""
        if self.store is None or self._failed:
            return None
        try:
            return what(self.store)
        except StoreError as exc:
            self._failed = True
            self.warn(f"{exc}; the chat goes on but is no longer saved")
            return None

    def set_model(self, info: ModelInfo | None) -> None:
        if info is None:
            self._fingerprint = None
            return
        try:
            self._fingerprint = model_fingerprint(info.path, quant=info.quant)
        except (OSError, StoreError):  # a server model: no file to fingerprint
            self._fingerprint = ModelFingerprint(path=info.path, quant=info.quant)

    def new_conversation(self) -> None:
        self.conversation_id = None
        self.reply_id = None

    def resume(self, conversation_id: int) -> None:
        self.conversation_id = conversation_id
        self.reply_id = None

    def save_user(
        self,
        text: str,
        system_prompt: str,
        settings: SamplerSettings,
        parent: int | None = None,
        attachments: tuple[dict, ...] = (),
    ) -> int | None:
        """Save a user turn (before its reply is generated), creating the conversation; it
        follows message `parent` (None: the last one), with the files attached to it.
        Returns its id (None: not saved)."""
        if self.conversation_id is None:
            path = self._fingerprint.path if self._fingerprint else ""
            self.conversation_id = self._do(
                lambda store: store.create_conversation(
                    title_from(text), system_prompt=system_prompt, model_path=path, sampler=settings
                )
            )
        row = None
        if self.conversation_id is not None:
            cid = self.conversation_id
            row = self._do(
                lambda store: store.add_message(
                    cid, "user", text, parent_id=parent, attachments=attachments
                )
            )
        return row

    def begin_reply(
        self, settings: SamplerSettings, parent: int | None = None, steering: Steering | None = None
    ) -> None:
        """Open the reply's row; it follows message `parent` (None: the last one), beside the
        replies that already follow it (branches); with the steering it is made with."""
        self.reply_id = None
        if self.conversation_id is not None:
            cid = self.conversation_id
            self.reply_id = self._do(
                lambda store: store.begin_reply(
                    cid,
                    model=self._fingerprint,
                    sampler=settings,
                    parent_id=parent,
                    steering=steering.to_dict() if steering else None,
                )  # fmt: skip
            )
        self._last_save = time.monotonic()

    def stream(self, text: str) -> None:
        """Save the reply so far, at most once a second."""
        reply_id = self.reply_id
        if reply_id is None or time.monotonic() - self._last_save < SAVE_EVERY_S:
            return
        self._last_save = time.monotonic()
        self._do(lambda store: store.update_reply(reply_id, text))

    def finish(
        self,
        text: str,
        event: Finished | None,
        settings: SamplerSettings,
        error: str | None = None,
        steering: Steering | None = None,
    ) -> int | None:
        """Store the end of a reply (with its steering, changes included); returns its id
        (None: not saved)."""
        if self.reply_id is None:
            return None
        if error is not None:
            status = MessageStatus.ERROR
        elif event is not None and event.reason == "cancelled":
            status = MessageStatus.INTERRUPTED
        else:
            status = MessageStatus.COMPLETE
        reply_id = self.reply_id
        self._do(
            lambda store: store.finish_reply(
                reply_id,
                text,
                status,
                stats=event.stats if event else None,
                stop_reason=str(event.reason) if event else None,
                error=error,
                sampler=settings,
                steering=steering.to_dict() if steering else None,
            )
        )
        self.reply_id = None
        return reply_id

    def delete(self, rows: list[int | None]) -> None:
        """Messages taken out of the conversation (edit, continue)."""
        dropped = [r for r in rows if r is not None]
        if dropped:
            self._do(lambda store: store.delete_messages(dropped))

    def choose(self, row: int | None) -> None:
        """The conversation goes on with this message's branch."""
        if row is not None:
            self._do(lambda store: store.choose_branch(row))

    def update_meta(self, system_prompt: str) -> None:
        if self.conversation_id is not None:
            cid = self.conversation_id
            self._do(lambda store: store.update_conversation(cid, system_prompt=system_prompt))
