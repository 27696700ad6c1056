"""Next-token probabilities: raw vs after the samplers, cut lines, and a cursor to pick one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive

from chatapp.chat.live_reply import LiveReply
from chatapp.engine.protocol import Candidate
from chatapp.sampling import BY_NAME, SamplerSettings
from chatapp.textsafe import token_display
from chatapp.ui.widgets.live_panel import LivePanel

BAR = 16
GRAMMAR_MARK = "⊘"  # marks a candidate the conversation's grammar (or JSON schema) does not allow


def bar(p: float, width: int = BAR) -> str:
    """A horizontal bar with eighth-cell resolution."""
    cells = max(0.0, min(1.0, p)) * width
    full = int(cells)
    rest = int((cells - full) * 8)
    return ("█" * full + (" ▏▎▍▌▋▊▉"[rest] if rest else "")).ljust(width)


class ProbPanel(LivePanel, can_focus=True):
    """Candidates of one step of the reply: the latest, or the one picked in the token panel.
    Focused, a cursor moves over the candidates; Enter (or a click) picks one: the reply goes
    on from that token."""

    COMPONENT_CLASSES = {
        "probpanel--raw",
        "probpanel--final",
        "probpanel--cut",
        "probpanel--chosen",
        "probpanel--dropped",
        "probpanel--cursor",
        "probpanel--hint",
    }
    DEFAULT_CSS = """
    ProbPanel { height: 15; padding: 0 1; }
    ProbPanel > .probpanel--raw { color: $prob-raw; }
    ProbPanel > .probpanel--final { color: $prob-final; }
    ProbPanel > .probpanel--cut { color: $prob-cut; text-style: bold; }
    ProbPanel > .probpanel--chosen { color: $accent; text-style: bold; }
    ProbPanel > .probpanel--dropped { color: $text-disabled; }
    ProbPanel > .probpanel--cursor { background: $accent 30%; }
    ProbPanel > .probpanel--hint { color: $text-muted; }
    ProbPanel:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("up", "move(-1)", "Previous candidate", show=False, id="probs.up"),
        Binding("down", "move(1)", "Next candidate", show=False, id="probs.down"),
        Binding("enter", "pick", "Pick this token", show=False, id="probs.pick"),
    ]

    @dataclass
    class Picked(Message):
        """A candidate was picked: the reply is to go on from it at `step` (None: the latest)."""

        panel: ProbPanel
        step: int | None
        candidate: Candidate

        @property
        def control(self) -> ProbPanel:
            return self.panel

    candidates: reactive[Sequence[Candidate]] = reactive(())
    """Candidates of the step shown, best first."""
    chosen: reactive[int | None] = reactive(None)
    """Id of the token that was picked at that step."""
    step: reactive[int | None] = reactive(None)
    """Index of the step in the reply (None before any token)."""
    settings: reactive[SamplerSettings] = reactive(SamplerSettings)
    """The sampler settings the step was sampled with."""
    cursor: reactive[int | None] = reactive(None)
    """Index of the candidate under the cursor (None: no cursor)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: list[int | None] = []  # the candidate drawn on each line (None: other)
        self._shown: LiveReply | None = None  # the reply handed last (`reply`: while no step is
        # picked, `step` None, its latest step is drawn; another reply shows its latest again)

    def validate_cursor(self, value: int | None) -> int | None:
        if value is None or not self.candidates:
            return None
        return max(0, min(len(self.candidates) - 1, value))

    def watch_reply(self, live: LiveReply | None) -> None:
        if live is not None and live is not self._shown:
            self.step = None
        self._shown = live or self._shown
        if live is None:
            self.chosen, self.candidates = None, ()
        elif self.step is None and live.tokens:
            last = live.tokens[-1]
            self.settings = live.settings_at(len(live.tokens) - 1, self.settings)
            self.chosen, self.candidates = last.id, last.candidates

    def watch_candidates(self) -> None:
        self.cursor = self.cursor  # (kept on the same row, within the new candidates)

    def on_focus(self) -> None:
        if self.cursor is None and self.candidates:
            ids = [c.id for c in self.candidates]
            self.cursor = ids.index(self.chosen) if self.chosen in ids else 0
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()  # (the cursor and the hint show while focused)

    def action_move(self, step: int) -> None:
        if self.candidates:
            self.cursor = (self.cursor if self.cursor is not None else -step) + step

    def action_pick(self) -> None:
        if self.cursor is not None and self.candidates:
            self.post_message(self.Picked(self, self.step, self.candidates[self.cursor]))

    def on_click(self, event: events.Click) -> None:
        line = event.y - self.styles.padding.top
        if 0 <= line < len(self._lines) and self._lines[line] is not None:
            self.cursor = self._lines[line]
            self.action_pick()

    def render(self) -> Text:
        self._lines = []
        if not self.candidates:
            return Text("No candidates yet: send a message.", style="dim")
        style = {
            k: self.get_component_rich_style(f"probpanel--{k}")
            for k in ("raw", "final", "cut", "chosen", "dropped", "cursor", "hint")
        }
        s = self.settings
        width = max(30, self.content_region.width or self.size.width)
        piece_w = 12
        bar_w = max(4, (width - 2 - piece_w - 2 * 6 - 2) // 2)
        title = "latest step" if self.step is None else f"step {self.step}"
        out = Text(no_wrap=True, overflow="crop")
        out.append(f"  {title:<{piece_w}}", style="bold")
        out.append(f"{'raw':<{bar_w + 7}}", style=style["raw"])
        out.append("after samplers\n", style=style["final"])
        self._lines.append(None)
        drawn = set()
        for row, c in enumerate(self.candidates):
            step = BY_NAME.get(c.cut_by)
            if step is not None and step.name not in drawn:  # above the first row it cut
                drawn.add(step.name)
                label = step.cut_text(s)
                out.append(
                    f"  ── {label} cut " + "─" * max(0, width - 16 - len(label)) + "\n",
                    style=style["cut"],
                )
                self._lines.append(None)
            start = len(out)
            is_chosen = c.id == self.chosen
            kept = c.kept
            piece_style = style["chosen"] if is_chosen else (None if kept else style["dropped"])
            if not c.kept_grammar:  # a grammar cut is not a prefix like the others: per row
                out.append(f"{GRAMMAR_MARK} ", style=style["cut"])
            else:
                out.append("▶ " if is_chosen else "  ", style=style["chosen"])
            out.append(f"{repr_piece(c.piece)[:piece_w]:<{piece_w}}", style=piece_style)
            known = c.p == c.p  # (nan: a server reported only what its samplers kept)
            raw_style = style["raw"] if kept else style["dropped"]
            out.append(bar(c.p if known else 0.0, bar_w), style=raw_style)
            out.append(f" {c.p:5.3f} " if known else "   -   ")
            out.append(bar(c.p_final, bar_w), style=style["final"])
            out.append(f" {c.p_final:5.3f}")
            if row == self.cursor and self.has_focus:
                out.stylize(style["cursor"], start, len(out))
            out.append("\n")
            self._lines.append(row)
        if any(not c.kept_grammar for c in self.candidates):
            out.append(f"  {GRAMMAR_MARK} cut by the grammar\n", style=style["cut"])
            self._lines.append(None)
        if self.has_focus:
            out.append("  ↑/↓ · Enter or click: continue from this token", style["hint"])
        out.rstrip()
        return out


def repr_piece(piece: bytes) -> str:
    shown = token_display(piece).replace("\n", "")
    return f"'{shown}'"
