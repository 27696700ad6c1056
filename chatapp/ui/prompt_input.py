"""The message box: multi-line; Enter sends, alt+enter or ctrl+j adds a line."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

from chatapp.textsafe import printable


class PromptInput(TextArea):
    """A TextArea that sends on Enter."""

    DEFAULT_CSS = """
    PromptInput { height: auto; min-height: 3; max-height: 10; border: tall $primary 50%; }
    PromptInput:focus { border: tall $primary; }
    """
    BINDINGS = [
        Binding("alt+enter,ctrl+j", "newline", "New line", show=False, id="prompt.newline"),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus")
        self.placeholder = "Message the model (Enter sends, alt+enter new line, F1 help)"
        self.free_keys: frozenset[str] = frozenset()  # left to the screen's keys while empty

    def check_consume_key(self, key: str, character: str | None = None) -> bool:
        """A printable key in `free_keys` typed into the empty box is a key of the screen's
        (the lesson's n and p); every other one is typed."""
        if key in self.free_keys and not self.text:
            return False
        return super().check_consume_key(key, character)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self.text))
            return
        await super()._on_key(event)

    async def _on_paste(self, event: events.Paste) -> None:
        # Pasted control characters (ESC sequences, NUL, C1...) become visible symbols: the
        # text box must never send raw escapes to the terminal.
        event.stop()
        event.prevent_default()
        if not self.read_only:
            text = event.text.replace("\r\n", "\n").replace("\r", "\n")
            self.replace(printable(text), *self.selection)

    def action_newline(self) -> None:
        self.insert("\n")
