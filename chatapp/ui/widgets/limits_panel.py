"""The Limits tab: the last reply against this machine's ceilings, a line and a roofline."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from chatapp.chat.live_reply import LiveReply
from chatapp.ui.literal import literal
from chatapp.ui.widgets.live_panel import LivePanel
from chatapp.ui.widgets.roofline import RooflineChart

WAITING = (
    "after a reply: its bytes and FLOPs per token against this machine's measured ceilings "
    "(measured by the tune on first use, or `chatapp machine`)"
)


class LimitsPanel(LivePanel, Vertical):
    """Where the last finished reply's decode and prefill stood: memory-, compute- or
    overhead-bound, the KV cache's share of each token's bytes, and the roofline chart."""

    needs = "limits"
    follows_branches = False

    DEFAULT_CSS = """
    LimitsPanel { height: 1fr; padding: 0 1; }
    LimitsPanel > #limits-line { height: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static(literal(WAITING), id="limits-line")
        yield RooflineChart(id="roofline")

    def watch_reply(self, live: LiveReply | None) -> None:
        if live is None or live.finished is None or not self.is_mounted:
            return  # drawn once the reply is over: nothing is added to its time
        limits = live.limits
        chart = self.query_one(RooflineChart)
        if limits is None:
            self.query_one("#limits-line", Static).update(literal(WAITING))
            chart.show(None)
            return
        kv = f"the KV cache is {limits.kv_share:.0%} of the {limits.bytes_per_token / 1e6:.1f} MB"
        prefill = (
            f"prefill {limits.prefill_gflops:.1f} GFLOP/s of {limits.compute_peak_gflops:.0f} "
            f"({limits.prefill_compute_share:.0%})"
        )
        text = f"{limits.line()}\n{prefill}; {kv} a token reads"
        self.query_one("#limits-line", Static).update(literal(text))
        chart.show(limits)
