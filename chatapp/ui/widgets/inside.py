"""The Inside tab: for the latest token, or the one selected in the Tokens tab, what each layer
would have predicted (logit lens), what the model attended to, and the token's neighbours."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from rich.color import Color, blend_rgb
from rich.style import Style
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive, var
from textual.widgets import Static

from chatapp.chat.live_reply import LiveReply
from chatapp.engine.inspection import REMOTE_NOTE as INSIDE_NOTE
from chatapp.engine.inspection import Inspection, InspectRequest
from chatapp.engine.protocol import Engine, EngineError, Token, TokenPiece
from chatapp.textsafe import token_display
from chatapp.ui.literal import literal
from chatapp.ui.widgets.live_panel import LivePanel
from chatapp.ui.widgets.tokens import TokenPanel

LONG_CONTEXT = 1000  # tokens past which a first capture is said to take seconds
SINK_SHARE = 0.3
HELP = (
    "What you are looking at: each row is a depth of the model (the embedding, each layer, the "
    "final output) read through its own output layer: the tokens it would predict there, and "
    "the probability of the token really written - where the bar grows is where the answer "
    "forms. The shaded text is how much this token's pass attended to each earlier token "
    "(mean over heads, or one head with h; [ and ] pick one layer). Neighbours are the nearest "
    "tokens in the embedding matrix. Keys: r capture again, [ / ] layer, h head."
)


@dataclass(frozen=True)
class Target:
    """What to look at: the pass at `position` of `tokens`, explaining `chosen`."""

    tokens: tuple[int, ...]
    position: int
    chosen: int | None
    label: str


class InsidePanel(LivePanel, VerticalScroll, can_focus=True):
    """Captures in a thread worker when shown (or on r); draws from the `inspection` reactive."""

    needs = "inside"  # hidden while the engine cannot look inside

    DEFAULT_CSS = """
    InsidePanel { height: 1fr; }
    InsidePanel > #inside-status { color: $text-muted; }
    InsidePanel > #inside-concept { height: auto; }
    InsidePanel .inside--bar { color: $accent; }
    InsidePanel .inside--heat { background: $warning; }
    InsidePanel .inside--muted { color: $text-muted; }
    """
    COMPONENT_CLASSES = {"inside--bar", "inside--heat", "inside--muted"}
    BINDINGS = [
        Binding("r", "capture", "Capture again", id="inside.capture"),
        Binding("[", "layer(-1)", "Attention: previous layer", id="inside.layer_prev"),
        Binding("]", "layer(1)", "Attention: next layer", id="inside.layer_next"),
        Binding("h", "head", "Attention: mean over heads, then each head", id="inside.head"),
    ]

    inspection: reactive[Inspection | None] = reactive(None)
    """The capture drawn (None: none yet)."""
    attention_layer: reactive[int] = reactive(0)  # (not `layer`: a Widget's CSS layer)
    """The attention layer shaded: 0 = the mean over all layers."""
    head: reactive[int] = reactive(-1)
    """The query head shaded: -1 = the mean over all heads."""
    status: reactive[str] = reactive("Select a token in the Tokens tab, or send a message.")
    reply: var[LiveReply | None] = var(None)
    """The reply to look into (its prompt and tokens); the token is the one selected in the
    Tokens tab, else its latest."""

    class Captured(Message):
        """A capture ended (`found`), or failed (`error`)."""

        def __init__(self, found: Inspection | None, error: str = "") -> None:
            super().__init__()
            self.found, self.error = found, error

    def __init__(
        self, *, id: str | None = None, engine: Callable[[], Engine | None] = lambda: None
    ) -> None:
        super().__init__(id=id)
        self.engine = engine  # the engine to capture with, when one is loaded
        self._last: Target | None = None
        self._captured_once = False

    def compose(self) -> ComposeResult:
        yield Static("", id="inside-status")
        yield Static("", id="inside-concept")
        yield Static("", id="inside-body")

    def show_concept(self, curve: Text) -> None:
        """The concept meter's per-layer curve of the selected token (the Steer tab draws it)."""
        self.query_one("#inside-concept", Static).update(curve)

    def on_mount(self) -> None:
        from textual.widgets import TabbedContent, TabPane

        tabs = next((a for a in self.ancestors if isinstance(a, TabbedContent)), None)
        pane = next((a for a in self.ancestors if isinstance(a, TabPane)), None)
        if tabs is not None and pane is not None:  # capture when our tab is brought up
            self.watch(tabs, "active", lambda active: self._tab_active(active == pane.id))

    def _tab_active(self, shown: bool) -> None:
        if shown:
            self.action_capture(only_if_new=True)

    # ---- what to capture ------------------------------------------------------------------

    def target(self) -> Target | None:
        """The token selected in the Tokens tab, else the reply's latest one."""
        live = self.reply
        if live is None:
            return None
        prompt = live.prompt.tokens if live.prompt is not None else ()
        pieces: list[Token | TokenPiece] = [*prompt, *live.tokens]
        if not pieces:
            return None
        cursor, show_prompt = self.selected()
        if show_prompt:
            at = cursor if cursor is not None else len(prompt) - 1
        else:
            at = len(prompt) + (cursor if cursor is not None else len(live.tokens) - 1)
        seq = tuple(t.id for t in pieces)
        if at <= 0:  # nothing predicts the first token: look at its own pass
            return Target(seq, 0, None, "the first token's pass")
        piece = token_display(pieces[at].piece)
        return Target(seq, at - 1, seq[at], f"how the model came to write {piece!r}")

    def selected(self) -> tuple[int | None, bool]:
        """The token under the Tokens tab's cursor (None: none), and whether the tab shows the
        prompt (the cursor's index is then the prompt's) rather than the reply."""
        panels = self.screen.query(TokenPanel)
        if not panels:
            return None, False
        panel = panels.first()
        return panel.strip.cursor, panel.show_prompt

    def action_capture(self, only_if_new: bool = False) -> None:
        target = self.target()
        if target is None:
            self.status = "Nothing to look at yet: send a message."
            return
        if only_if_new and target == self._last:
            return
        engine = self.engine()
        if engine is None:
            self.status = "No model is loaded."
            return
        if not engine.capabilities.inside:  # as it declares: no capture is asked for
            self.status = INSIDE_NOTE
            return
        self._last = target
        note = ""
        if not self._captured_once and target.position >= LONG_CONTEXT:
            note = f" (the first capture reads all {target.position + 1} tokens: seconds)"
        self.status = f"Capturing {target.label} at position {target.position}…{note}"
        self._run(engine, target)

    @work(thread=True, exclusive=True, exit_on_error=False, group="inside")
    def _run(self, engine, target: Target) -> None:
        request = InspectRequest(target.tokens, position=target.position, chosen=target.chosen)
        try:
            found = engine.inspect(request)
        except EngineError as exc:
            self.post_message(self.Captured(None, str(exc)))
            return
        self.post_message(self.Captured(found))

    def on_inside_panel_captured(self, message: Captured) -> None:
        if message.found is None:
            self.status = message.error
            return
        self._captured_once = True
        if self.head >= message.found.n_head:  # a model with fewer heads: back to the mean
            self.head = -1
        t = message.found.timings
        label = self._last.label if self._last else ""
        self.status = f"Inside: {label} ({t.get('total_ms', 0):.0f} ms)"
        self.inspection = message.found

    def action_layer(self, step: int) -> None:
        if self.inspection is not None:
            self.attention_layer = (self.attention_layer + step) % (self.inspection.n_layers + 1)

    def action_head(self) -> None:
        """Mean over heads -> head 0 -> ... -> head N-1 -> the mean again."""
        if self.inspection is not None:
            self.head = self.head + 1 if self.head + 1 < self.inspection.n_head else -1

    def head_label(self, found: Inspection) -> str:
        if self.head < 0:
            return f"mean over {found.n_head} heads"
        n_kv = max(min(found.n_head_kv, found.n_head), 1)
        if n_kv == found.n_head:
            return f"head {self.head} of {found.n_head}"
        return f"head {self.head} (KV group {found.kv_head(self.head)} of {n_kv})"

    # ---- drawing ---------------------------------------------------------------------------

    def watch_status(self, value: str) -> None:
        if self.is_mounted:
            self.query_one("#inside-status", Static).update(literal(value))

    def watch_inspection(self) -> None:
        self._draw()

    def watch_attention_layer(self) -> None:
        self._draw()

    def watch_head(self) -> None:
        self._draw()

    def _draw(self) -> None:
        if not self.is_mounted or self.inspection is None:
            return
        self.query_one("#inside-body", Static).update(self.render_inspection(self.inspection))

    def render_inspection(self, found: Inspection) -> Text:
        bar = self.get_component_rich_style("inside--bar", partial=True)
        muted = self.get_component_rich_style("inside--muted", partial=True)
        heat = self.get_component_rich_style("inside--heat", partial=True)
        out = Text()
        chosen = token_display(found.chosen.piece)
        if found.lens_ok:
            out.append(f"Layers: p of {chosen!r} by depth, and what each would predict\n", muted)
            for lens in found.layers:
                p = lens.chosen_p
                out.append(f"{lens.name:<10}")
                out.append(_bar(p, 12), bar)
                out.append(" " * (12 - len(_bar(p, 12))))
                out.append(" -    " if math.isnan(p) else f" {p:.2f} ")
                tops = "  ".join(f"{token_display(r.piece)!r} {r.p:.2f}" for r in lens.top)
                out.append(f"#{lens.chosen_rank:<5} {tops}\n" if lens.top else "\n", muted)
        else:
            out.append(found.lens_note + "\n", muted)
        where = "all layers" if self.attention_layer == 0 else f"layer {self.attention_layer}"
        head = self.head if 0 <= self.head < found.n_head else None
        mean = np.nan_to_num(found.mean_attention(self.attention_layer or None, head))
        out.append(f"\nAttention ({where}, {self.head_label(found)}; [ ] h)\n", muted)
        top = float(mean.max()) or 1.0
        base = self.app.current_theme.background if hasattr(self.app, "current_theme") else None
        for piece, w in zip(found.pieces, mean, strict=True):
            out.append(token_display(piece), _shade(heat, float(w) / top, base))
        out.append("\n")
        for pos in np.argsort(-mean)[:5]:
            shown = token_display(found.pieces[pos])
            out.append(f"  {pos:>5} {shown!r:<20} {mean[pos]:.3f}\n")
        if len(mean) > 1 and mean[0] >= SINK_SHARE:
            out.append(
                f"  The first token takes {mean[0]:.0%}: an attention sink, where heads with "
                "nothing to read park their weight.\n",
                muted,
            )
        near = ", ".join(f"{token_display(n.piece)!r} {n.cosine:.2f}" for n in found.neighbours)
        out.append(f"\nNearest to {chosen!r} in the embedding: ", muted)
        out.append(near + "\n")
        for note in found.notes:
            out.append(f"note: {note}\n", muted)
        out.append("\n" + HELP, muted)
        return out


def _bar(p: float, width: int) -> str:
    if math.isnan(p):
        return ""
    return "█" * int(round(p * width))


def _shade(heat: Style, share: float, background) -> Style:
    """The heat colour blended into the background by `share` (0..1)."""
    hot = heat.bgcolor or heat.color or Color.parse("red")
    cold = Color.parse(background) if isinstance(background, str) and background else None
    if cold is None or cold.triplet is None or hot.triplet is None:
        return Style(bgcolor=hot) if share > 0.5 else Style()
    mixed = blend_rgb(cold.triplet, hot.triplet, max(0.0, min(share, 1.0)))
    return Style(bgcolor=Color.from_triplet(mixed))
