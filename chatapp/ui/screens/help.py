"""The help screen: every key, what it does and its binding id (rows from ui/keys.py)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 80; max-width: 95%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", id="help.close")]

    def __init__(self, rows: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        table = Table(title="chatapp keys", expand=True, box=None)
        table.add_column("key", style="bold", no_wrap=True)
        table.add_column("does")
        table.add_column("binding id", style="dim", no_wrap=True)
        for key, desc, bid in self.rows:
            if key:
                table.add_row(Text(key), Text(desc), Text(bid or "—"))
            else:  # a section: where these keys work
                table.add_row("", Text(desc, style="bold underline"), "", end_section=False)
        with VerticalScroll():
            yield Static(table)
            yield Static(
                "Esc closes. A key with a binding id can be moved in config.toml's [keys] "
                '(e.g. chat.regenerate = "ctrl+g"); — marks one that cannot. Every action is '
                "also in the command palette."
            )
