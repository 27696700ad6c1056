"""The side panels' feed while a reply streams: prompt tokens, reply tokens, speed, candidates."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from chatapp.engine.protocol import Finished, PromptEvaluated, Token
from chatapp.stats_text import threads_text
from chatapp.ui.pacing import FramePacer
from chatapp.ui.reply import Reply
from chatapp.ui.streaming import SMOOTH
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.stats import SPARK_POINTS, StatsPanel
from chatapp.ui.widgets.tokens import ShownToken, TokenPanel

if TYPE_CHECKING:
    from textual.widget import Widget


def shown(tok: Token) -> ShownToken:
    return ShownToken(tok.id, tok.piece, tok.logprob, drafted=tok.drafted, rejected=tok.rejected)


class PanelFeed:
    """Batches what the Tokens, Next-token and Speed panels show: the chat pane takes every
    token batch, the panels at most once per `pacer.panels_s` (a frame that repaints them
    costs the whole screen), and always the first token's and the last."""

    def __init__(
        self, host: Widget, tokens: TokenPanel, probs: ProbPanel, stats: StatsPanel
    ) -> None:
        self.host = host  # its timers
        self.tokens, self.probs, self.stats = tokens, probs, stats
        self.pacer = FramePacer(SMOOTH)  # the pane's: how often a streaming reply is drawn
        self.reply: Reply | None = None
        self.settings = None  # the sampler settings the candidates are shown against
        self.unshown: list[Token] = []  # tokens of the reply not yet in the panels
        self._at = 0.0  # when the panels were last redrawn
        self._timer = None
        self._prompt: PromptEvaluated | None = None  # not yet in the panels
        self._prompt_len = 0

    def start(self, reply: Reply) -> None:
        """A reply begins (its prefix tokens, if it continues one, are shown at once)."""
        self.cancel()
        self.reply = reply
        self.unshown = []
        self._prompt = None
        self._at = 0.0
        self.probs.step = None
        self.tokens.reset_reply([shown(t) for t in reply.tokens])
        self.stats.speeds = ()
        self.stats.stats = self.stats.stats.but(
            state="generating",
            stop_reason="",
            tokens=len(reply.tokens),
            decode_tps=None,
            drafted=0,
        )
        self.stats.notes = ""

    def prompt(self, event: PromptEvaluated) -> None:
        # Shown with the panels, after the first token is on screen: a frame drawing the
        # prompt's tokens would otherwise delay that first paint.
        self._prompt_len = len(event.tokens)
        self._prompt = event
        if self.reply is None:
            self.refresh()

    def took(self, tokens: list[Token], first: bool) -> None:
        self.unshown.extend(tokens)
        wait = self._at + self.pacer.panels_s - time.perf_counter()
        if first:
            self._at = time.perf_counter()  # the next batches wait for the interval
            self.host.call_after_refresh(self.refresh)  # the first token's frame stays small
        elif wait <= 0:
            self.refresh()
        elif self._timer is None:
            self._timer = self.host.set_timer(wait, self.refresh)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def end(self) -> None:
        """The reply is over: everything it wrote goes into the panels now."""
        self.refresh()
        self.reply = None

    def finished(self, reply: Reply, ev: Finished, notes: str) -> None:
        """The Speed panel's figures of the reply that just ended (after `end`)."""
        st = ev.stats
        self.stats.stats = self.stats.stats.but(
            state="ready",
            stop_reason=str(ev.reason),
            ttft_s=st.ttft_s,
            decode_tps=st.decode_tps or reply.decode_tps,
            tokens=len(reply.tokens),
            n_past=st.n_past,
            n_ctx=st.n_ctx or self.stats.stats.n_ctx,
            drafted=sum(t.drafted for t in reply.tokens),
            threads=threads_text(st),
        )
        self.stats.notes = notes

    def refresh(self) -> None:
        """Bring the side panels up to the reply's latest token."""
        self.cancel()
        reply = self.reply
        self._at = time.perf_counter()
        if self._prompt is not None:
            self._show_prompt(self._prompt)
            self._prompt = None
        if reply is None or not self.unshown:
            return
        new, self.unshown = self.unshown, []
        self.tokens.add_reply([shown(t) for t in new])
        last = new[-1]
        if self.probs.step is None:
            self.probs.settings = self.settings
            self.probs.chosen = last.id
            self.probs.candidates = last.candidates
        self.stats.speeds = tuple(reply.speeds[-SPARK_POINTS:])  # not the whole reply
        self.stats.stats = self.stats.stats.but(
            ttft_s=reply.ttft_s,
            decode_tps=reply.decode_tps,
            tokens=len(reply.tokens),
            drafted=sum(t.drafted for t in reply.tokens),
            n_past=self._prompt_len + len(reply.tokens),
            first_paint_s=reply.first_paint_s,
        )

    def _show_prompt(self, ev: PromptEvaluated) -> None:
        self.tokens.set_prompt([ShownToken(t.id, t.piece, special=t.special) for t in ev.tokens])
        self.stats.stats = self.stats.stats.but(
            prefill_tps=(ev.n_new / ev.prefill_s) if ev.prefill_s > 0 else None,
            prompt_new=ev.n_new,
            prompt_reused=ev.n_reused,
        )
