"""A dialog to set the system prompt."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, TextArea


class SystemPromptScreen(ModalScreen[str | None]):
    DEFAULT_CSS = """
    SystemPromptScreen { align: center middle; }
    SystemPromptScreen > Vertical { width: 80; max-width: 95%; height: 18;
        border: round $primary; background: $surface; padding: 0 1; }
    SystemPromptScreen TextArea { height: 1fr; }
    SystemPromptScreen Horizontal { height: 3; align-horizontal: right; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="system.cancel"),
        Binding("ctrl+s", "save", "Save", id="system.save"),
    ]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.initial = text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("System prompt (ctrl+s saves, Esc cancels)")
            yield TextArea(self.initial, id="system-text", soft_wrap=True)
            with Horizontal():
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def action_save(self) -> None:
        self.dismiss(self.query_one("#system-text", TextArea).text.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_save() if event.button.id == "save" else self.action_cancel()
