"""Token boundaries of the reply or the templated prompt, and a box that tokenizes any text."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.color import Color, blend_rgb
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Input, Static

from chatapp.chat.live_reply import LiveReply
from chatapp.engine.protocol import PromptEvaluated, Token, TokenPiece
from chatapp.textsafe import escape_bytes, token_display
from chatapp.ui.literal import literal
from chatapp.ui.widgets.live_panel import LivePanel

Drawn = Token | TokenPiece
"""A token as a strip draws it: the reply's (the session's LiveReply holds them), or one of the
templated prompt or of a typed text (its id, bytes, and whether it is special)."""


def is_special(tok: Drawn) -> bool:
    return isinstance(tok, TokenPiece) and tok.special


def logprob_of(tok: Drawn) -> float | None:
    return tok.logprob if isinstance(tok, Token) else None


def drafted(tok: Drawn) -> bool:
    """The token came from an accepted draft (speculative decoding)."""
    return isinstance(tok, Token) and tok.drafted


def rejected(tok: Drawn) -> tuple[bytes, ...]:
    """The drafts turned down at this token's position."""
    return tok.rejected if isinstance(tok, Token) else ()


class TokenStrip(Widget, can_focus=True):
    """Tokens drawn with alternating colours; a cursor picks one (arrow keys or the mouse)."""

    COMPONENT_CLASSES = {
        "tokenstrip--a",
        "tokenstrip--b",
        "tokenstrip--special",
        "tokenstrip--cursor",
        "tokenstrip--id",
        "tokenstrip--draft",
        "tokenstrip--rejected",
        "tokenstrip--sure",
        "tokenstrip--surprised",
        "tokenstrip--steer-mark",
        "tokenstrip--concept-low",
        "tokenstrip--concept-high",
    }
    DEFAULT_CSS = """
    TokenStrip { height: auto; min-height: 1; padding: 0 1; }
    TokenStrip > .tokenstrip--a { background: $token-a; color: $foreground; }
    TokenStrip > .tokenstrip--b { background: $token-b; color: $foreground; }
    TokenStrip > .tokenstrip--special { background: $token-special; color: $foreground;
        text-style: bold; }
    TokenStrip > .tokenstrip--cursor { background: $accent; color: $background;
        text-style: bold; }
    TokenStrip > .tokenstrip--id { color: $text-muted; }
    TokenStrip > .tokenstrip--draft { color: $token-draft; text-style: underline; }
    TokenStrip > .tokenstrip--rejected { color: $text-disabled; text-style: strike; }
    TokenStrip > .tokenstrip--sure { background: $success-darken-2; color: $foreground; }
    TokenStrip > .tokenstrip--surprised { background: $error; color: $foreground; }
    TokenStrip > .tokenstrip--steer-mark { color: $warning; text-style: bold; }
    TokenStrip > .tokenstrip--concept-low { background: $primary; color: $foreground; }
    TokenStrip > .tokenstrip--concept-high { background: $warning; color: $foreground; }
    TokenStrip:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("left", "move(-1)", "Previous token", show=False, id="tokens.left"),
        Binding("right", "move(1)", "Next token", show=False, id="tokens.right"),
        Binding("home", "jump(0)", "First token", show=False, id="tokens.home"),
        Binding("end", "jump(-1)", "Last token", show=False, id="tokens.end"),
        Binding("d", "toggle_rejected", "Rejected drafts", show=False, id="tokens.rejected"),
    ]

    tokens: reactive[tuple[Drawn, ...]] = reactive((), layout=True)
    """The tokens to draw."""
    show_ids: reactive[bool] = reactive(False, layout=True)
    """Draw each token's id after it."""
    cursor: reactive[int | None] = reactive(None)
    """Index of the selected token, or None."""
    show_rejected: reactive[bool] = reactive(False, layout=True)
    """Draw the drafts turned down at each position after its token (speculative decoding)."""
    surprise: reactive[bool] = reactive(False)
    """Colour each token with a log-probability by how surprised the model was to write it."""
    marks: reactive[frozenset[int]] = reactive(frozenset())
    """Tokens drawn after a ▸: the first computed with steering changed mid-reply."""
    concept: reactive[tuple[float, ...]] = reactive(())
    """The concept meter per token, -1..1 (NaN: none): low and high colours, over surprise."""

    class Selected(Message):
        """The cursor moved to a token."""

        def __init__(self, strip: TokenStrip, index: int) -> None:
            super().__init__()
            self.strip = strip
            self.index = index

        @property
        def control(self) -> TokenStrip:
            return self.strip

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._spans: list[tuple[int, int]] = []

    def append(self, new: Sequence[Drawn]) -> None:
        self.tokens = self.tokens + tuple(new)

    def render(self) -> Text:
        styles = [self.get_component_rich_style(f"tokenstrip--{k}") for k in ("a", "b")]
        special = self.get_component_rich_style("tokenstrip--special")
        cursor = self.get_component_rich_style("tokenstrip--cursor")
        id_style = self.get_component_rich_style("tokenstrip--id")
        draft = self.get_component_rich_style("tokenstrip--draft")
        cut = self.get_component_rich_style("tokenstrip--rejected")
        text = Text(no_wrap=False, overflow="fold")
        self._spans = []
        for i, tok in enumerate(self.tokens):
            start = len(text)
            style = cursor if i == self.cursor else special if is_special(tok) else styles[i % 2]
            logprob = logprob_of(tok)
            if self.surprise and logprob is not None and i != self.cursor:
                style = self.surprise_style(logprob)
            if i < len(self.concept) and not math.isnan(self.concept[i]) and i != self.cursor:
                style = self.concept_style(style, self.concept[i])
            if drafted(tok) and i != self.cursor:
                style = style + draft
            if i in self.marks:
                text.append("▸", self.get_component_rich_style("tokenstrip--steer-mark"))
                start = len(text)
            text.append(token_display(tok.piece) or "∅", style)
            if self.show_ids:
                text.append(f"{tok.id}", id_style)
                text.append(" ")
            self._spans.append((start, len(text)))
            turned_down = rejected(tok)
            if self.show_rejected and turned_down:
                text.append("⟨" + "".join(token_display(p) for p in turned_down) + "⟩", cut)
        if not self.tokens:
            text.append("(no tokens yet)", id_style)
        return text

    def surprise_style(self, logprob: float) -> Style:
        """sure (p 1) -> surprised (p <= 2^-SURPRISE_BITS), blended by the token's bits."""
        sure = self.get_component_rich_style("tokenstrip--sure")
        hot = self.get_component_rich_style("tokenstrip--surprised")
        share = min(surprise_bits(logprob) / SURPRISE_BITS, 1.0)
        a, b = sure.bgcolor, hot.bgcolor
        if a is None or b is None or a.triplet is None or b.triplet is None:
            return hot if share > 0.5 else sure
        return sure + Style(bgcolor=Color.from_triplet(blend_rgb(a.triplet, b.triplet, share)))

    def concept_style(self, base: Style, share: float) -> Style:
        """The token's own colours blended toward concept-high (share 1) or -low (share -1)."""
        end = self.get_component_rich_style(f"tokenstrip--concept-{'high' if share > 0 else 'low'}")
        a, b = base.bgcolor, end.bgcolor
        if a is None or b is None or a.triplet is None or b.triplet is None:
            return end if abs(share) > 0.5 else base
        mixed = blend_rgb(a.triplet, b.triplet, min(abs(share), 1.0))
        return base + Style(bgcolor=Color.from_triplet(mixed))

    def action_toggle_rejected(self) -> None:
        self.show_rejected = not self.show_rejected

    def watch_cursor(self, value: int | None) -> None:
        if value is not None:
            self.post_message(self.Selected(self, value))

    def action_move(self, step: int) -> None:
        if not self.tokens:
            return
        current = self.cursor if self.cursor is not None else len(self.tokens)
        self.cursor = max(0, min(len(self.tokens) - 1, current + step))

    def action_jump(self, where: int) -> None:
        if self.tokens:
            self.cursor = where % len(self.tokens)

    def on_click(self, event: events.Click) -> None:
        index = self._index_at(event.x, event.y)
        if index is not None:
            self.cursor = index

    def _index_at(self, x: int, y: int) -> int | None:
        """Map a cell to a token by re-wrapping the rendered text at the widget width."""
        width = max(1, self.content_region.width)
        text = self.render()
        lines = text.wrap(self.app.console, width)
        offset = 0
        for row, line in enumerate(lines):
            if row == y - self.styles.padding.top:
                pos = offset + max(0, x - self.styles.padding.left)
                for i, (a, b) in enumerate(self._spans):
                    if a <= pos < b:
                        return i
                return None
            offset += len(line.plain) + (1 if line.plain and not line.plain.endswith("\n") else 0)
        return None


SURPRISE_BITS = 10.0  # a token the model gave p <= 2^-10 (about 0.001) is fully "surprised"


def surprise_bits(logprob: float) -> float:
    """-log2 p: 0 for a certain token, 1 for a coin flip."""
    return max(-logprob / math.log(2), 0.0)


def perplexity(tokens: Sequence[Token]) -> tuple[float, int] | None:
    """exp of the mean negative log-probability over the tokens that carry one, and how many."""
    lps = [t.logprob for t in tokens if t.logprob is not None]
    return (math.exp(-sum(lps) / len(lps)), len(lps)) if lps else None


def describe(tok: Drawn, index: int) -> str:
    """One line about a token: index, id, exact bytes, probability."""
    parts = [f"#{index}", f"id {tok.id}", f"bytes {escape_bytes(tok.piece)!s}"]
    logprob = logprob_of(tok)
    if logprob is not None:
        p, bits = math.exp(logprob), surprise_bits(logprob)
        parts.append(f"logprob {logprob:.3f} (p {p:.3f}, surprise {bits:.1f} bits)")
    if drafted(tok):
        parts.append("from an accepted draft")
    if rejected(tok):
        shown = "".join(token_display(p) for p in rejected(tok))
        parts.append(f"draft turned down: {shown!r}")
    return "  ".join(parts)


class TokenPanel(LivePanel, Vertical):
    """The reply's (or, toggled, the whole templated prompt's) tokens, and a tokenizer box.
    The reply comes through `reply` and is drawn in its watcher: its new tokens are added to
    the strip, a reply other than the one drawn replaces it (and its prompt, when it has one)."""

    DEFAULT_CSS = """
    TokenPanel { height: 1fr; overflow-y: auto; }
    TokenPanel > .title { height: 1; color: $text-muted; }
    TokenPanel > #token-info { height: auto; color: $text; background: $boost; padding: 0 1; }
    TokenPanel > #tokenizer-input { margin-top: 1; }
    TokenPanel > #tokenizer-count { height: 1; color: $text-muted; padding: 0 1; }
    TokenPanel > #reply-tokens { max-height: 60%; overflow-y: auto; }
    TokenPanel > #surprise-legend { height: auto; padding: 0 1; display: none; }
    TokenPanel.-surprise > #surprise-legend { display: block; }
    """

    show_prompt: reactive[bool] = reactive(False)
    """Show the templated prompt (specials included) instead of the reply."""
    surprise: reactive[bool] = reactive(False)
    """Colour the reply's tokens by the probability the model gave each, with its perplexity."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.prompt: list[TokenPiece] = []  # of the latest reply that had one
        self._prompt_of: PromptEvaluated | None = None
        self._drawn: LiveReply | None = None  # the reply in the strip, and how many of its tokens
        self._drawn_n = 0
        self.concept: tuple[float, ...] = ()  # the reply's concept meter (TokenStrip.concept)

    @property
    def reply_tokens(self) -> list[Token]:
        return self.reply.tokens if self.reply is not None else []

    def compose(self) -> ComposeResult:
        yield Static("Reply tokens", classes="title", id="token-title")
        yield TokenStrip(id="reply-tokens")
        yield Static("", id="surprise-legend")
        yield Static("", id="token-info")
        yield Input(placeholder="Type any sentence to see its tokens", id="tokenizer-input")
        yield Static("", id="tokenizer-count")
        yield TokenStrip(id="typed-tokens")

    @property
    def strip(self) -> TokenStrip:
        return self.query_one("#reply-tokens", TokenStrip)

    @property
    def steer_marks(self) -> frozenset[int]:
        """The reply's tokens where new steering took effect (its LiveReply keeps them)."""
        changes = self.reply.steering_changes if self.reply is not None else []
        return frozenset(index for index, _ in changes)

    def show_steering(self) -> None:
        """Mark (▸) where the reply's steering changed; the prompt view has no marks."""
        self.strip.marks = frozenset() if self.show_prompt else self.steer_marks

    def show_concept(self, values: tuple[float, ...]) -> None:
        """Colour the reply's tokens by the concept meter (-1..1 each; () clears it)."""
        self.concept = values
        self.strip.concept = () if self.show_prompt else values

    def watch_reply(self, live: LiveReply | None) -> None:
        if not self.is_mounted:
            return
        if live is not None and live.prompt is not None and live.prompt is not self._prompt_of:
            self._prompt_of = live.prompt
            self.prompt = list(live.prompt.tokens)
            if self.show_prompt:
                self.strip.tokens = tuple(self.prompt)
        tokens = live.tokens if live is not None else []
        if live is not self._drawn:
            self._drawn = live
            if not self.show_prompt:
                self.strip.cursor = None
                self.strip.tokens = tuple(tokens)
            self.show_steering()  # (a branch looked at keeps its marks)
            self.show_concept(())
            self._legend()
        elif len(tokens) > self._drawn_n:
            if not self.show_prompt:
                self.strip.append(tokens[self._drawn_n :])
            if self.surprise:
                self._legend()
        self._drawn_n = len(tokens)

    def watch_surprise(self, value: bool) -> None:
        if not self.is_mounted:
            return
        self.set_class(value, "-surprise")
        self.strip.surprise = value
        self._legend()

    def _legend(self) -> None:
        """Under the strip while surprise is on: the colour scale and the reply's perplexity."""
        if not self.is_mounted or not self.surprise:
            return
        strip = self.strip
        text = Text("surprise: ")
        for label, p in (
            ("p 1", 1.0),
            ("0.5", 0.5),
            ("0.1", 0.1),
            ("0.01", 0.01),
            ("≤0.001", 1e-3),
        ):
            text.append(f" {label} ", strip.surprise_style(math.log(p)))
            text.append(" ")
        found = perplexity(self.reply_tokens)
        if found is None:
            text.append(" no probabilities for this reply", "dim")
        else:
            ppl, n = found
            text.append(f" reply perplexity {ppl:.2f} over {n} tokens")
        if self.show_prompt:
            text.append(" (the prompt's tokens have none: F4 shows the reply)", "dim")
        self.query_one("#surprise-legend", Static).update(text)

    def watch_show_prompt(self, value: bool) -> None:
        if not self.is_mounted:
            return
        self.query_one("#token-title", Static).update(
            "Templated prompt (specials highlighted)" if value else "Reply tokens"
        )
        self.strip.cursor = None
        self.strip.tokens = tuple(self.prompt if value else self.reply_tokens)
        self.show_steering()
        self.show_concept(self.concept)
        self._legend()

    def toggle_ids(self) -> None:
        for strip in self.query(TokenStrip):
            strip.show_ids = not strip.show_ids

    def on_token_strip_selected(self, message: TokenStrip.Selected) -> None:
        strip = message.strip
        if 0 <= message.index < len(strip.tokens):
            where = (
                "typed" if strip.id == "typed-tokens" else "prompt" if self.show_prompt else "reply"
            )
            self.query_one("#token-info", Static).update(
                literal(f"{where} {describe(strip.tokens[message.index], message.index)}")
            )

    def show_typed(self, tokens: Sequence[TokenPiece]) -> None:
        self.query_one("#typed-tokens", TokenStrip).tokens = tuple(tokens)
        n_chars = len(self.query_one("#tokenizer-input", Input).value)
        self.query_one("#tokenizer-count", Static).update(
            f"{len(tokens)} tokens, {n_chars} characters" if tokens else ""
        )
