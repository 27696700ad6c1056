"""Files attached to the message being written (`/file PATH` lines), shown on the input's border:
each one's size in tokens and whether the message fits the context with the reply's room."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from chatapp.chat.attachments import (
    FRAMING_TOKENS,
    Attachment,
    AttachmentError,
    read_attachment,
    reply_budget,
    split_file_lines,
    trimmed,
)
from chatapp.engine.protocol import EngineError
from chatapp.ui.literal import literal

if TYPE_CHECKING:
    from chatapp.ui.app import ChatApp

DETACH = "/detach"  # typed alone: the attachments go
TRIM = "/trim"  # typed alone: the files are cut to what fits beside the message


class AttachBox:
    """The ChatApp's attachments for the next message. `take` reads the commands out of what
    was submitted; `ready` checks the whole message before it is sent."""

    def __init__(self, app: ChatApp) -> None:
        self.app = app
        self.files: list[Attachment] = []

    def take(self, text: str) -> str | None:
        """Attach the files of `/file PATH` lines (or drop all for /detach). Returns the text to
        send, or None when the input held only commands (it then keeps the rest)."""
        if text.strip() == DETACH:
            self.files = []
            self.app.set_status("attachments removed")
            self.show()
            return None
        lines = text.splitlines()
        if any(line.strip() == TRIM for line in lines):  # a /trim line: cut, keep the rest
            rest = "\n".join(line for line in lines if line.strip() != TRIM).strip()
            self.app.query_one("#prompt").text = rest
            self.trim(rest)
            return None
        rest, paths = split_file_lines(text)
        if not paths:
            return text
        for path in paths:
            try:
                self.files.append(self.counted(read_attachment(path)))
            except AttachmentError as exc:
                self.app.set_status(str(exc), error=True)
        self.show()
        self.app.query_one("#prompt").text = rest  # what was typed beside the commands stays
        return None

    def add(self, path: str) -> str:
        """Attach one file (the file picker's choice); one line saying what happened."""
        try:
            file = self.counted(read_attachment(path))
        except AttachmentError as exc:
            self.app.set_status(str(exc), error=True)
            return str(exc)
        self.files.append(file)
        self.show()
        return f"attached {file.name}: {len(self.files)} file(s) for the next message"

    def counted(self, file: Attachment) -> Attachment:
        engine = self.app.engine
        if engine is None:
            return file
        try:
            return replace(file, tokens=len(engine.tokenize(file.block(), special=False)))
        except EngineError:
            return file

    def context(self) -> tuple[int, int]:
        """(n_ctx, the reply's room) of the model loaded; (0, 0) before one is."""
        info = self.app.session.info
        n_ctx = info.n_ctx if info is not None else 0
        return n_ctx, reply_budget(self.app.session.settings.max_tokens, n_ctx)

    def label(self) -> str:
        """What the input's border says: each file with its tokens, then whether it fits."""
        if not self.files:
            return ""
        names = " · ".join(
            f"{f.name.rsplit('/', 1)[-1]} {f.tokens:,} tok" if f.tokens is not None else f.name
            for f in self.files
        )
        n_ctx, budget = self.context()
        known = [f.tokens for f in self.files if f.tokens is not None]
        if not n_ctx or len(known) < len(self.files):
            return f"📎 {names}"
        total = sum(known)
        verdict = "fits" if total + budget <= n_ctx else "too big"
        return f"📎 {names} — {total:,} + {budget:,} for the reply of {n_ctx:,}: {verdict}"

    def show(self) -> None:
        self.app.query_one("#prompt").border_title = literal(self.label())

    def ready(self, text: str) -> str | None:
        """The problem (one sentence with the numbers) when the message with its files cannot
        fit even alone; None when it can be sent."""
        return self.app.session.too_long(text, self.files) or None

    def trim(self, typed: str) -> None:
        """Cut the files to the tokens left beside the typed message, the system prompt and
        the reply's room: the choice to send only the start of what is too big."""
        engine, n_ctx = self.app.engine, self.context()[0]
        if not self.files or engine is None or not n_ctx:
            self.app.set_status("nothing to trim: no files attached, or no model loaded")
            return
        session = self.app.session
        head = f"{session.system_prompt}\n" if session.system_prompt else ""
        try:
            used = len(engine.tokenize(head + typed, special=False)) + FRAMING_TOKENS
            self.files = trimmed(engine, self.files, n_ctx - self.context()[1] - used)
        except EngineError as exc:
            self.app.set_status(f"could not trim the files: {exc}", error=True)
            return
        self.app.set_status("files cut to what fits: Enter sends the message")
        self.show()

    def sent(self) -> list[Attachment]:
        """The files go with the message now sent; the box is empty again."""
        files, self.files = self.files, []
        self.show()
        return files
