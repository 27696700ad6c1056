"""Files attached to the message being written (`/file PATH` lines), shown on the input's border:
each one's size in tokens and whether the message fits the context with the reply's room."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol

from chatapp.chat.attachments import (
    ANY_CONTEXT,
    FRAMING_TOKENS,
    STDIN,
    STDIN_IN_CHAT,
    Attachment,
    AttachmentError,
    byte_limit,
    count_one,
    fit_problem,
    longest_token_bytes,
    read_attachment,
    reply_budget,
    split_file_lines,
    trimmed,
)
from chatapp.engine.protocol import EngineError
from chatapp.ui.literal import literal

if TYPE_CHECKING:
    from textual.app import App

    from chatapp.chat.session import ChatSession
    from chatapp.ui.engine_slot import EngineSlot
    from chatapp.ui.prompt_input import PromptInput


class Pane(Protocol):
    """What the box uses of the conversation pane it serves."""

    session: ChatSession
    slot: EngineSlot
    app: App

    @property
    def prompt(self) -> PromptInput: ...

    def set_status(self, text: str, error: bool = False) -> None: ...


DETACH = "/detach"  # typed alone: the attachments go
TRIM = "/trim"  # typed alone: the files are cut to what fits beside the message


class AttachBox:
    """A conversation pane's attachments for the next message. `take` reads the commands out of what
    was submitted; files are read and counted in a thread (the UI keeps answering); `ready`
    checks the whole message before it is sent."""

    def __init__(self, pane: Pane) -> None:
        self.pane = pane
        self.files: list[Attachment] = []
        self.reading: list[str] = []  # paths being read and counted now
        self.trimming = False  # /trim cuts the files in a thread
        self._round = 0  # /detach starts a new one: files of an older round are dropped
        # Files are read in parallel threads but attached in the order they were asked for:
        # a result waits in _arrived until those asked for before it are in.
        self._asked = 0  # the sequence number of the next file asked for
        self._next = 0  # the sequence number of the next file to attach
        self._arrived: dict[int, tuple] = {}

    def take(self, text: str) -> str | None:
        """Attach the files of `/file PATH` lines (or drop all for /detach). Returns the text to
        send, or None when the input held only commands (it then keeps the rest)."""
        if text.strip() == DETACH:
            self.files, self.reading, self.trimming = [], [], False
            self._round += 1
            self._arrived.clear()
            self._next = self._asked
            self.pane.set_status("attachments removed")
            self.show()
            return None
        lines = text.splitlines()
        if any(line.strip() == TRIM for line in lines):  # a /trim line: cut, keep the rest
            rest = "\n".join(line for line in lines if line.strip() != TRIM).strip()
            self.pane.prompt.text = rest
            self.trim(rest)
            return None
        rest, paths = split_file_lines(text)
        if not paths:
            return text
        self.pane.prompt.text = rest  # what was typed beside the commands stays
        for path in paths:
            self.add(path)
        return None

    def add(self, path: str, told: Callable[[str], None] | None = None) -> None:
        """Attach one file: read and counted in a thread; `told` (the file picker's note) and
        the status line get the sentence saying what happened."""
        if path == STDIN:  # (reading it would take the keys from the app: it would freeze)
            self._tell(STDIN_IN_CHAT, told, error=True)
            return
        self.reading.append(path)
        self._tell(f"reading {path}…", told)
        engine, n_ctx = self.pane.slot.engine, self.context()[0]
        info = self.pane.session.info
        model = info.path if info is not None else ""
        budget, asked = self.context()[1], (self._round, self._asked)
        self._asked += 1
        job = partial(self._read, path, engine, n_ctx, budget, model, told, asked)
        self.pane.app.run_worker(job, thread=True, group="attach", exit_on_error=False)

    def _read(self, path, engine, n_ctx, reply_room, model, told, asked) -> None:
        """In a worker thread: read the file, refuse it from its size when it cannot fit,
        count its tokens; the result goes back to the UI thread."""
        limit = byte_limit(n_ctx, reply_room, longest_token_bytes(model)) if n_ctx else None
        try:
            file = read_attachment(path, limit=limit or ANY_CONTEXT, regular_only=True)
            result: Attachment | str = count_one(engine, file)
        except AttachmentError as exc:
            result = str(exc)
        self.pane.app.call_from_thread(self._read_done, path, result, told, asked)

    def _read_done(self, path: str, result: Attachment | str, told, asked: tuple) -> None:
        round_, seq = asked
        if round_ != self._round:
            return  # detached meanwhile
        self._arrived[seq] = (path, result, told)
        while self._next in self._arrived:
            self._attach(*self._arrived.pop(self._next))
            self._next += 1

    def _attach(self, path: str, result: Attachment | str, told) -> None:
        """A file read (or refused), in the order it was asked for."""
        if path in self.reading:
            self.reading.remove(path)
        if isinstance(result, str):
            self._tell(result, told, error=True)
            return
        self.files.append(result)
        self.show()
        self._tell(f"attached {result.name}: {len(self.files)} file(s) for the next message", told)

    def _tell(self, sentence: str, told, error: bool = False) -> None:
        self.pane.set_status(sentence, error=error)
        if told is not None:
            told(sentence)

    def context(self) -> tuple[int, int]:
        """(n_ctx, the reply's room) of the model loaded; (0, 0) before one is."""
        info = self.pane.session.info
        n_ctx = info.n_ctx if info is not None else 0
        return n_ctx, reply_budget(self.pane.session.settings.max_tokens, n_ctx)

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
        self.pane.prompt.border_title = literal(self.label())

    def ready(self, text: str) -> str | None:
        """The problem (one sentence with the numbers) when the message with its files cannot
        fit even alone, or while a file is still being read or cut; None when it can be sent.
        Files whose counts already exceed the room are refused without tokenizing again."""
        if self.reading:
            return f"{self.reading[0]} is still being read; press Enter again once it is attached"
        if self.trimming:
            return "the files are still being cut; press Enter again in a moment"
        n_ctx, budget = self.context()
        counts = [f.tokens for f in self.files if f.tokens is not None]
        if n_ctx and counts and len(counts) == len(self.files):
            problem = fit_problem(sum(counts), n_ctx, budget)  # (the files alone: too many)
            if problem:
                return problem
        return self.pane.session.too_long(text, self.files) or None

    def trim(self, typed: str) -> None:
        """Cut the files to the tokens left beside the typed message, the system prompt and
        the reply's room: the choice to send only the start of what is too big (in a
        thread: it tokenizes every file)."""
        engine, (n_ctx, budget) = self.pane.slot.engine, self.context()
        if not self.files or engine is None or not n_ctx:
            self.pane.set_status("nothing to trim: no files attached, or no model loaded")
            return
        session = self.pane.session
        head = f"{session.system_prompt}\n" if session.system_prompt else ""
        self.trimming = True
        self.pane.set_status("cutting the files to what fits…")
        job = partial(self._trim, engine, head + typed, n_ctx - budget, self.files, self._round)
        self.pane.app.run_worker(job, thread=True, group="attach", exit_on_error=False)

    def _trim(self, engine, typed: str, room: int, files, round_: int) -> None:
        try:
            used = len(engine.tokenize(typed, special=False)) + FRAMING_TOKENS
            result: list[Attachment] | str = trimmed(engine, files, room - used)
        except EngineError as exc:
            result = f"could not trim the files: {exc}"
        self.pane.app.call_from_thread(self._trim_done, result, len(files), round_)

    def _trim_done(self, result: list[Attachment] | str, cut: int, round_: int) -> None:
        self.trimming = False
        if round_ != self._round:
            return  # detached meanwhile
        if isinstance(result, str):
            self.pane.set_status(result, error=True)
            return
        self.files = result + self.files[cut:]  # (files attached meanwhile stay whole)
        self.pane.set_status("files cut to what fits: Enter sends the message")
        self.show()

    def sent(self) -> list[Attachment]:
        """The files go with the message now sent; the box is empty again."""
        files, self.files = self.files, []
        self.show()
        return files
