"""Speed and context: TTFT, prefill and decode rates, a sparkline, context used, stop reason."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.console import Group
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Sparkline, Static

from chatapp.chat.live_reply import LiveReply
from chatapp.engine.protocol import ModelInfo, gpu_layer_total
from chatapp.stats_text import decode_text, ms_text, prefill_text, threads_text
from chatapp.ui.literal import literal
from chatapp.ui.widgets.live_panel import LivePanel, LoadedModel

SPARK_POINTS = 60  # the sparkline shows the speed of the last this many tokens


@dataclass(frozen=True)
class LiveStats:
    """What the stats panel shows; the screen replaces it, the panel redraws."""

    ttft_s: float | None = None
    first_paint_s: float | None = None  # submit -> first token painted, measured in the UI
    prefill_tps: float | None = None
    prompt_new: int = 0
    prompt_reused: int = 0
    decode_tps: float | None = None
    tokens: int = 0
    drafted: int = 0  # tokens of the reply that came from accepted drafts
    n_past: int = 0
    n_ctx: int = 0
    stop_reason: str = ""
    state: str = "loading"
    threads: str = ""  # the last reply's threads (stats_text.threads_text): "" = as loaded

    def but(self, **changes) -> LiveStats:
        return replace(self, **changes)


def reply_stats(live: LiveReply, base: LiveStats) -> LiveStats:
    """The Speed panel's figures of a reply, streaming or over (the one place they are
    computed), on top of `base` (the model's: its state, its context size)."""
    figures: dict = dict(
        state="generating",
        stop_reason="",
        ttft_s=live.ttft_s,
        first_paint_s=live.first_paint_s,
        decode_tps=live.decode_tps,
        tokens=len(live.tokens),
        drafted=live.drafted,
    )
    prompt = live.prompt
    if prompt is not None:
        figures.update(
            prefill_tps=(prompt.n_new / prompt.prefill_s) if prompt.prefill_s > 0 else None,
            prompt_new=prompt.n_new,
            prompt_reused=prompt.n_reused,
            n_past=len(prompt.tokens) + len(live.tokens),
        )
    ended = live.finished
    if ended is not None:
        st = ended.stats
        figures.update(
            state="ready",
            stop_reason=str(ended.reason),
            ttft_s=st.ttft_s,
            decode_tps=st.decode_tps or live.decode_tps,
            n_past=st.n_past,
            n_ctx=st.n_ctx or base.n_ctx,
            threads=threads_text(st),
        )
    elif live.error:
        figures.update(state="error", stop_reason="error")
    return base.but(**figures)


MISSING = "–"  # a cell of the panel with nothing measured yet


def context_bar(used: int, total: int, width: int, fill: Style, free: Style) -> Text:
    """`used` of `total` as a bar of `width` cells (filled in `fill`, the rest in `free`) and
    the numbers."""
    frac = used / total if total else 0.0
    filled = round(frac * width)
    text = Text()
    text.append("█" * filled, style=fill)
    text.append("░" * (width - filled), style=free)
    text.append(f" {used}/{total}")
    return text


def run_settings(info: ModelInfo, threads: str = "") -> str:
    """How llama.cpp runs here: threads (`threads`: as the last reply ended, e.g. '1 of 2:
    another program is busy'), flash attention (and exact batches: drafted replies are then
    the replies without), extra CPU buffers, huge pages (for the weights too?), whether
    tuned."""
    fa = ("fa on" if info.flash_attn else "fa off") + (" exact" if info.exact_batches else "")
    repack = (
        ("repack " + "+".join(info.extra_buffers))
        if info.extra_buffers
        else ("repack on" if info.repack else "repack off")
    )
    pages = " · THP" if info.huge_pages else ""  # transparent huge pages
    if info.huge_pages and info.weights_in_memory:
        pages += " weights"  # the weights too, read into memory (huge_pages.weights_in_memory)
    count = threads or str(info.n_threads)
    return f"{count} · {fa} · {repack}{pages}" + (" · tuned" if info.tuned else "")


class StatsPanel(LivePanel, Vertical):
    """Live numbers from the engine's own timestamps, plus UI first-paint for comparison. It
    keeps the figures of the last reply streamed (a branch looked at does not replace them)."""

    follows_branches = False

    DEFAULT_CSS = """
    StatsPanel { height: auto; padding: 0 1; }
    StatsPanel > #stats-table { height: 6; }
    StatsPanel > Sparkline { height: 2; margin: 0 0; }
    StatsPanel > Sparkline > .sparkline--max-color { color: $spark-max; }
    StatsPanel > Sparkline > .sparkline--min-color { color: $spark-min; }
    StatsPanel > #stats-notes { height: auto; color: $text-muted; }
    StatsPanel > .context-bar--used { color: $success; }
    StatsPanel > .context-bar--high { color: $warning; }
    StatsPanel > .context-bar--full { color: $error; }
    StatsPanel > .context-bar--free { text-style: dim; }
    """

    COMPONENT_CLASSES = {
        "context-bar--used",
        "context-bar--high",
        "context-bar--full",
        "context-bar--free",
    }
    """The context bar's colours: up to 70% used, to 90%, past 90%, and the free part."""

    stats: reactive[LiveStats] = reactive(LiveStats)
    """The numbers to show."""
    info: reactive[ModelInfo | None] = reactive(None)
    """The loaded model."""
    speeds: reactive[tuple[float, ...]] = reactive(())
    """Per-token decode speed (t/s) of the last SPARK_POINTS tokens, for the sparkline."""
    notes: reactive[str] = reactive("")
    """Lines under the sparkline: why the last reply took its time, what drafting did."""

    def compose(self) -> ComposeResult:
        yield Static(id="stats-table")
        yield Sparkline([], id="speed-spark")
        yield Static("", id="stats-notes")

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._redraw())

    def context_text(self, used: int, total: int, width: int = 12) -> Text:
        """The context bar in the theme's colours (COMPONENT_CLASSES)."""
        frac = used / total if total else 0.0
        level = "full" if frac > 0.9 else "high" if frac > 0.7 else "used"
        fill = self.get_component_rich_style(f"context-bar--{level}", partial=True)
        free = self.get_component_rich_style("context-bar--free", partial=True)
        return context_bar(used, total, width, fill, free)

    def on_resize(self) -> None:
        self._redraw()  # the context bar's width follows the panel's

    def model_changed(self, model: LoadedModel | None) -> None:
        """Loading, loaded (the figures start again), tuned (its settings), or none."""
        super().model_changed(model)
        if model is None:
            return
        if model.state == "loading":
            self.stats = LiveStats(state="loading")
        elif model.state == "no model":
            self.stats = self.stats.but(state="no model")
        else:
            self.info = model.info
            if model.state == "ready" and model.info is not None:
                self.stats = LiveStats(state="ready", n_ctx=model.info.n_ctx)

    def reply_begins(self) -> None:
        self.notes = ""

    def reply_ended(self, notes: str) -> None:
        self.notes = notes

    def watch_notes(self, notes: str) -> None:
        if self.is_mounted:
            self.query_one("#stats-notes", Static).update(literal(notes))

    def watch_reply(self, live: LiveReply | None) -> None:
        if live is not None:
            self.speeds = tuple(live.speeds[-SPARK_POINTS:])  # not the whole reply
            self.stats = reply_stats(live, self.stats)

    def watch_stats(self) -> None:
        self._redraw()

    def watch_info(self) -> None:
        self._redraw()

    def watch_speeds(self, speeds: tuple[float, ...]) -> None:
        if self.is_mounted:
            self.query_one(Sparkline).data = list(speeds) or [0.0]

    def _redraw(self) -> None:
        if not self.is_mounted:
            return
        s, info = self.stats, self.info
        t = Table.grid(padding=(0, 1))
        t.add_column(style="bold", no_wrap=True)
        t.add_column(no_wrap=True)
        t.add_column(style="bold", no_wrap=True)
        t.add_column(no_wrap=True)
        ttft, paint = ms_text(s.ttft_s, MISSING), ms_text(s.first_paint_s, MISSING)
        t.add_row("TTFT", ttft, "paint", paint)
        t.add_row(
            "prefill",
            prefill_text(s.prefill_tps, MISSING),
            "new/reused",
            f"{s.prompt_new}/{s.prompt_reused}",
        )
        tokens = f"{s.tokens} ({s.drafted} drafted)" if s.drafted else str(s.tokens)
        t.add_row("decode", decode_text(s.decode_tps, MISSING), "tokens", tokens)
        # a narrow panel (under 56 columns) gets a shorter bar, so every value stays whole
        bar_width = 12 if self.size.width >= 56 else 6
        t.add_row(
            "context",
            self.context_text(s.n_past, s.n_ctx or (info.n_ctx if info else 0), bar_width),
            "stop",
            s.stop_reason or s.state,
        )
        if info is not None:
            gpu = (
                f"{info.n_gpu_layers}/{gpu_layer_total(info.n_layers)}"
                if info.gpu_offload_supported
                else "cpu"
            )
            t.add_row("load", f"{info.load_s:.2f} s", "gpu layers", gpu)
        # the run settings under the grid, on a line of their own: they do not widen its columns
        threads = (
            Text.assemble(("threads ", "bold"), run_settings(info, s.threads)) if info else Text()
        )
        table = Group(t, threads)
        self.query_one("#stats-table", Static).update(table, layout=False)  # fixed height
