"""The side panels of a conversation's screen, and the live reply handed to them."""

from __future__ import annotations

import time
from functools import cached_property
from typing import TYPE_CHECKING

from chatapp.chat.live_reply import LiveReply
from chatapp.ui.pacing import FramePacer
from chatapp.ui.widgets.inside import InsidePanel
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.sampler import SamplerPanel
from chatapp.ui.widgets.stats import StatsPanel
from chatapp.ui.widgets.tokens import TokenPanel

if TYPE_CHECKING:
    from textual.widget import Widget


class PanelFeed:
    """The Speed, Next token, Tokens, Inside and Sampler panels of `host`'s screen (their one
    home), and the reply they show: each gets it through its `reply` reactive and draws in its
    watcher. A streaming reply reaches them on its text frames (the token messages of
    ui/streaming.py, paced by `pacer`: the UI's one batching stage), on those at least
    `pacer.panels_s` apart (a frame that repaints them costs the whole screen), and always on
    the first token's and the last."""

    def __init__(self, host: Widget, pacer: FramePacer, holder: Widget | None = None) -> None:
        self.host = host  # its refreshes time the first token's
        self.holder = holder  # holds the Next token, Tokens and Speed panels (None: the screen)
        self.pacer = pacer
        self.live: LiveReply | None = None
        self._at = 0.0  # when the panels were last given the reply

    @property
    def _holder(self) -> Widget:
        return self.holder or self.host.screen

    @cached_property
    def probs(self) -> ProbPanel:
        return self._holder.query_one("#probs", ProbPanel)

    @cached_property
    def tokens(self) -> TokenPanel:
        return self._holder.query_one("#tokens", TokenPanel)

    @cached_property
    def stats(self) -> StatsPanel:
        return self._holder.query_one("#stats", StatsPanel)

    @cached_property
    def sampler(self) -> SamplerPanel:
        return self.host.screen.query_one("#sampler", SamplerPanel)

    @cached_property
    def inside(self) -> InsidePanel | None:
        """The Inside tab, where the screen has one."""
        found = self.host.screen.query(InsidePanel)
        return found.first() if found else None

    def start(self, live: LiveReply) -> None:
        """A reply begins: its tokens so far (the prefix it continues, if any) and its latest
        step are shown, its figures from now on."""
        self.probs.step = None
        self.stats.notes = ""
        self.show(live)

    def look_at(self, live: LiveReply) -> None:
        """A reply made earlier (a branch switched to): its tokens and its latest step; the
        Speed panel keeps the figures of the last reply streamed."""
        self.probs.step = None
        self.live = live
        self._hand(live)

    def frame(self, first: bool) -> None:
        """A text frame of the streaming reply was drawn: the panels follow when due."""
        if first:
            self._at = time.perf_counter()  # the next frames wait for the interval
            self.host.call_after_refresh(self.show)  # the first token's frame stays small
        elif time.perf_counter() - self._at >= self.pacer.panels_s:
            self.show()

    def end(self, notes: str = "") -> None:
        """The reply is over: everything it wrote, and how it ended, goes into the panels."""
        self.show()
        self.stats.notes = notes

    def clear(self) -> None:
        """A new chat: no reply in the panels."""
        self.live = None
        self._hand(None)

    def show(self, live: LiveReply | None = None) -> None:
        """Hand the reply (this one, else the last one handed) to the panels: they redraw."""
        self.live = live = live or self.live
        self._at = time.perf_counter()
        if live is not None:
            self._hand(live)
            self.stats.reply = live

    def _hand(self, live: LiveReply | None) -> None:
        """The token panels (Tokens, Next token, Inside) get `live`."""
        self.tokens.reply = self.probs.reply = live
        if self.inside is not None:
            self.inside.reply = live
