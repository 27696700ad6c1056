"""The help screen: every key, what it does and its binding id (rows from ui/keys.py)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

INSIDE_TITLE = "What you are looking at (Inside tab)"
INSIDE_TEXT = (
    "Logit lens: each layer's residual stream read through the model's final norm and output "
    "head, as if the model stopped there - the tokens it would predict and the probability of "
    "the token really written; where that bar grows is where the answer forms. Attention: how "
    "much this token's pass looked at each earlier token, the mean over heads (h steps through "
    "single heads, naming their grouped-query KV group; [ and ] pick a layer). A first token "
    "holding much of the weight is an "
    "attention sink: where heads with nothing to read park it. Neighbours: the tokens nearest "
    "the chosen one in the embedding matrix (cosine)."
)

STEER_TITLE = "Steering (Steer tab, alt+v)"
STEER_TEXT = (
    "For each token the model keeps a vector as wide as the model (576 numbers here) that "
    "flows through the layers, each adding its bit: the residual stream. Many concepts - a "
    "mood, a language, a register - lie along a direction in it. Read texts that differ in one "
    "concept only (happy / sad versions of the same sentences) and average their streams: the "
    "difference of the two means cancels all they share and points from one side to the "
    "other - one direction per layer, kept as a control vector. The slider's strength S adds "
    "S times that direction to the stream of every token after each chosen layer (from/to), "
    "from the next token on (marked ▸ in Tokens); 0 is the model as it is, too much makes it "
    "babble. m meters the reply: each token's projection on the direction at one layer as a "
    "colour in Tokens, the selected token's curve over the layers in Inside. A server cannot "
    "be steered: its layers are not ours to add to. Make a vector from your own examples in "
    "the tab, or `chatapp steer make` (docs/steering.md)."
)


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
            yield Static(Text("\n" + INSIDE_TITLE, style="bold underline"), id="help-inside-title")
            yield Static(Text(INSIDE_TEXT), id="help-inside")
            yield Static(Text("\n" + STEER_TITLE, style="bold underline"), id="help-steer-title")
            yield Static(Text(STEER_TEXT), id="help-steer")
            yield Static(  # Text: "[keys]" is not markup
                Text(
                    "\nEsc closes. A key with a binding id can be moved in config.toml's [keys] "
                    '(e.g. chat.regenerate = "ctrl+g"); — marks one that cannot. Every action is '
                    "also in the command palette."
                )
            )
