"""A dialog to hold the conversation's replies to a JSON schema or a GBNF grammar (a file)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from chatapp.engine.protocol import Grammar
from chatapp.engine.schema_grammar import GrammarError, load_grammar
from chatapp.ui.literal import literal

CLEAR = "clear"
NUL_IN_PATH = "the path holds a NUL character, which no file name has: type it again"


class GrammarScreen(ModalScreen[Grammar | str | None]):
    """Asks for a file: a .json file is a JSON schema, any other is llama.cpp's GBNF. Dismissed
    with the Grammar, CLEAR (replies are free again) or None (nothing changes)."""

    DEFAULT_CSS = """
    GrammarScreen { align: center middle; }
    GrammarScreen > Vertical { width: 80; max-width: 95%; height: auto;
        border: round $primary; background: $surface; padding: 0 1; }
    GrammarScreen #grammar-error { color: $error; height: auto; }
    GrammarScreen #grammar-now { color: $text-muted; height: auto; }
    GrammarScreen Horizontal { height: 3; align-horizontal: right; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="grammar.cancel")]

    def __init__(self, current: Grammar | None, path: str = "") -> None:
        super().__init__()
        self.current = current
        self.path = path

    def compose(self) -> ComposeResult:
        now = f"now: {self.current.source}" if self.current else "now: none (replies are free)"
        with Vertical():
            yield Label("Structured output: a JSON schema (.json) or a GBNF grammar file")
            yield Static(literal(now), id="grammar-now")
            yield Input(self.path, placeholder="path/to/schema.json", id="grammar-path")
            yield Static("", id="grammar-error")
            with Horizontal():
                yield Button("Use", variant="primary", id="use")
                yield Button("Clear", id="clear", disabled=self.current is None)
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#grammar-path", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_use()

    def action_use(self) -> None:
        path = self.query_one("#grammar-path", Input).value.strip()
        if not path or "\0" in path:  # (open() raises ValueError on a NUL)
            problem = NUL_IN_PATH if path else "give the path of a file"
            self.query_one("#grammar-error", Static).update(problem)
            return
        try:
            grammar = load_grammar(path)
        except GrammarError as exc:
            self.query_one("#grammar-error", Static).update(literal(exc))
            return
        self.dismiss(grammar)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "use":
            self.action_use()
        elif event.button.id == "clear":
            self.dismiss(CLEAR)
        else:
            self.action_cancel()
