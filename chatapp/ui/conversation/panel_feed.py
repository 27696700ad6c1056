"""The live reply handed to the panels that follow it, paced with the reply's text frames."""

from __future__ import annotations

import time
from functools import cached_property

from textual.widget import Widget

from chatapp.chat.live_reply import LiveReply
from chatapp.ui.pacing import FramePacer
from chatapp.ui.widgets.live_panel import LiveFeed
from chatapp.ui.widgets.sampler import SamplerPanel
from chatapp.ui.widgets.tokens import TokenPanel


class PanelFeed(LiveFeed):
    """A conversation's live panels (each joins on mount: LivePanel) and the reply they show:
    each gets it through its `reply` reactive and draws in its watcher. A streaming reply
    reaches them on its text frames (the token messages of ui/streaming.py, paced by `pacer`:
    the UI's one batching stage), on those at least `pacer.panels_s` apart (a frame that
    repaints them costs the whole screen), and always on the first token's and the last."""

    def __init__(self, host: Widget, pacer: FramePacer) -> None:
        super().__init__(host)  # the conversation (its `model`)
        self.host = host  # its refreshes time the first token's
        self.pacer = pacer
        self.live: LiveReply | None = None
        self._at = 0.0  # when the panels were last given the reply

    @property
    def tokens(self) -> TokenPanel:
        return self.find(TokenPanel)

    @cached_property
    def sampler(self) -> SamplerPanel:
        return self.host.screen.query_one("#sampler", SamplerPanel)

    def start(self, live: LiveReply) -> None:
        """A reply begins: its tokens so far (the prefix it continues, if any) and its latest
        step are shown, its figures from now on."""
        self.reply_begins()
        self.show(live)

    def look_at(self, live: LiveReply) -> None:
        """A reply made earlier (a branch switched to): its tokens and its latest step; the
        Speed panel keeps the figures of the last reply streamed."""
        self.live = live
        self.hand(live, streamed=False)

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
        self.reply_ended(notes)

    def clear(self) -> None:
        """A new chat: no reply in the panels (the Speed panel keeps its figures)."""
        self.live = None
        self.hand(None, streamed=False)

    def show(self, live: LiveReply | None = None) -> None:
        """Hand the reply (this one, else the last one handed) to the panels: they redraw."""
        self.live = live = live or self.live
        self._at = time.perf_counter()
        if live is not None:
            self.hand(live, streamed=True)
