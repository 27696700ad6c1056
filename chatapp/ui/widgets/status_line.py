"""A screen's status line: what runs, its stage and seconds so far, or how the last work ended."""

from __future__ import annotations

import time

from textual.widgets import Static

from chatapp.ui.literal import literal


class StatusLine(Static):
    """One line of plain text (never markup); `error` styles a failure."""

    def __init__(self, text: str = "", *, id: str | None = None) -> None:
        super().__init__(text, id=id)
        self.started = 0.0
        self.stage = ""
        """What the work under way does now ("" before it says)."""

    def show(self, text: str, error: bool = False) -> None:
        self.update(literal(text))
        self.set_class(error, "error")

    def start(self, busy: str) -> None:
        """Work began: its stage is not known yet, and its seconds count from now."""
        self.stage = ""
        self.started = time.perf_counter()
        self.show(f"{busy}…")

    def tick(self, busy: str) -> None:
        """While `busy`, the line says what runs, its stage and the seconds so far."""
        if busy:
            stage = f": {self.stage}" if self.stage else ""
            self.show(f"{busy}{stage}… {time.perf_counter() - self.started:.0f} s")
