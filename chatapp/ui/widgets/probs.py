"""Next-token probabilities: raw vs after the samplers, with the top-k/top-p/min-p cut lines."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from chatapp.engine.protocol import Candidate
from chatapp.sampling import SamplerSettings
from chatapp.textsafe import token_display

BAR = 16


def bar(p: float, width: int = BAR) -> str:
    """A horizontal bar with eighth-cell resolution."""
    cells = max(0.0, min(1.0, p)) * width
    full = int(cells)
    rest = int((cells - full) * 8)
    return ("█" * full + (" ▏▎▍▌▋▊▉"[rest] if rest else "")).ljust(width)


class ProbPanel(Widget):
    """Candidates of one step of the reply: the latest, or the one picked in the token panel."""

    COMPONENT_CLASSES = {
        "probpanel--raw",
        "probpanel--final",
        "probpanel--cut",
        "probpanel--chosen",
        "probpanel--dropped",
    }
    DEFAULT_CSS = """
    ProbPanel { height: 15; padding: 0 1; }
    ProbPanel > .probpanel--raw { color: $prob-raw; }
    ProbPanel > .probpanel--final { color: $prob-final; }
    ProbPanel > .probpanel--cut { color: $prob-cut; text-style: bold; }
    ProbPanel > .probpanel--chosen { color: $accent; text-style: bold; }
    ProbPanel > .probpanel--dropped { color: $text-disabled; }
    """

    candidates: reactive[tuple[Candidate, ...]] = reactive(())
    """Candidates of the step shown, best first."""
    chosen: reactive[int | None] = reactive(None)
    """Id of the token that was picked at that step."""
    step: reactive[int | None] = reactive(None)
    """Index of the step in the reply (None before any token)."""
    settings: reactive[SamplerSettings] = reactive(SamplerSettings)
    """The sampler settings the step was sampled with."""

    def render(self) -> Text:
        if not self.candidates:
            return Text("No candidates yet: send a message.", style="dim")
        style = {
            k: self.get_component_rich_style(f"probpanel--{k}")
            for k in ("raw", "final", "cut", "chosen", "dropped")
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
        prev = None
        for c in self.candidates:
            if prev is not None:
                for label, was, now in (
                    (f"top-k {s.top_k}", prev.kept_top_k, c.kept_top_k),
                    (f"top-p {s.top_p:g}", prev.kept_top_p, c.kept_top_p),
                    (f"min-p {s.min_p:g}", prev.kept_min_p, c.kept_min_p),
                ):
                    if was and not now:
                        out.append(
                            f"  ── {label} cut " + "─" * max(0, width - 16 - len(label)) + "\n",
                            style=style["cut"],
                        )
            prev = c
            is_chosen = c.id == self.chosen
            kept = c.kept
            piece_style = style["chosen"] if is_chosen else (None if kept else style["dropped"])
            out.append("▶ " if is_chosen else "  ", style=style["chosen"])
            out.append(f"{repr_piece(c.piece)[:piece_w]:<{piece_w}}", style=piece_style)
            out.append(bar(c.p, bar_w), style=style["raw"] if kept else style["dropped"])
            out.append(f" {c.p:5.3f} ")
            out.append(bar(c.p_final, bar_w), style=style["final"])
            out.append(f" {c.p_final:5.3f}\n")
        out.rstrip()
        return out


def repr_piece(piece: bytes) -> str:
    shown = token_display(piece).replace("\n", "")
    return f"'{shown}'"
