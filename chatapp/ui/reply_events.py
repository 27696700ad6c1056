"""The chat app's handling of a reply's events: prompt, tokens, prefill, notices, the end."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from chatapp.stats_text import threads_text
from chatapp.ui.prompt_input import PromptInput
from chatapp.ui.reply import footer_for
from chatapp.ui.shell import settle_gc

if TYPE_CHECKING:
    from chatapp.ui.messages import (
        NoticeShown,
        PrefillProgressed,
        PromptShown,
        ReplyFailed,
        ReplyFinished,
        SettingsTookEffect,
        TokensArrived,
    )
    from chatapp.ui.reply import Reply


class ReplyEvents:
    """ChatApp's handlers of the messages the generation thread posts (ui/streaming.py):
    each maps the engine's events onto the reply in the chat and the side panels, and the
    last one ends the reply.

    A mixin of ChatApp: it uses the app's session, reply, panels and status line."""

    def on_prompt_shown(self, message: PromptShown) -> None:
        self.session.prompt_evaluated(message.event)
        self.panels.prompt(message.event)

    async def on_tokens_arrived(self, message: TokensArrived) -> None:
        reply = self.reply
        if reply is None or message.reply_id != reply.id:
            return
        if any(t.seq for t in message.tokens):  # several replies at once (regenerate x N):
            self.session.took([t for t in message.tokens if t.seq])  # the others are kept
            message.tokens = [t for t in message.tokens if not t.seq]  # the first is shown
            if not message.tokens:
                return
        first = not reply.tokens or len(reply.tokens) == len(reply.prefix_ids)
        reply.add(message.tokens)
        self.pacer.framed()
        self.paint_log.append((time.perf_counter(), len(message.tokens)))
        self.session.took(message.tokens)
        if self.session.draft is not None:
            await reply.show_text(self.session.draft)
        if first and reply.first_paint_s is None:
            self.call_after_refresh(self._record_first_paint, reply)
        self.panels.settings = self.settings
        self.panels.took(message.tokens, first)

    def on_prefill_progressed(self, message: PrefillProgressed) -> None:
        if self.reply is None or message.reply_id != self.reply.id:
            return
        done, total, elapsed = message.done, message.total, message.elapsed_s
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = f", about {(total - done) / rate:.0f} s left" if rate > 0 else ""
        self.set_status(
            f"reading the prompt: {done:,}/{total:,} tokens ({rate:,.0f} t/s{eta}; Esc stops)"
        )

    def _record_first_paint(self, reply: Reply) -> None:
        reply.first_paint_s = time.perf_counter() - reply.submitted
        self.first_paint_s.append(reply.first_paint_s)
        self.stats_panel.stats = self.stats_panel.stats.but(first_paint_s=reply.first_paint_s)

    def on_settings_took_effect(self, message: SettingsTookEffect) -> None:
        index = message.event.index
        self.sampler.set_status(f"applied from token {index} of the reply")
        if self.reply is not None:
            self.reply.settings_changes.append((index, message.event.settings))

    def on_notice_shown(self, message: NoticeShown) -> None:
        self.notify(message.message, title="Note", severity="warning")

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        reply = self.reply
        if reply is None or message.reply_id != reply.id:
            return
        self.panels.end()
        ev = message.event
        reply.finished = ev
        st = ev.stats
        draft = self.session.draft
        label = reply.thinking_label(draft) if draft else ""
        split = self.session.finished(ev)
        if split.thinking or split.closed:
            if not split.closed:
                label += " · the reply ended while thinking"
            await reply.item.finish(
                split.answer,
                footer_for(ev, reply, self.info),
                split.thinking,
                label,
                fold=split.closed,
            )
        else:
            await reply.item.finish(ev.text, footer_for(ev, reply, self.info))
        self.branches.finished(reply.item.footer)
        self.stats_panel.stats = self.stats_panel.stats.but(
            state="ready",
            stop_reason=str(ev.reason),
            ttft_s=st.ttft_s,
            decode_tps=st.decode_tps or reply.decode_tps,
            tokens=len(reply.tokens),
            n_past=st.n_past,
            n_ctx=st.n_ctx or self.stats_panel.stats.n_ctx,
            drafted=sum(t.drafted for t in reply.tokens),
            threads=threads_text(st),
        )
        model = self.info.path if self.info else ""
        self.stats_panel.notes = self.report.note(ev, model, reply.first_paint_s)
        detail = f" ({ev.detail})" if ev.detail else ""
        self.set_status(f"done: {ev.reason}{detail}" + (f" · {reply.note}" if reply.note else ""))
        self._end_reply()

    async def on_reply_failed(self, message: ReplyFailed) -> None:
        reply = self.reply
        if reply is None or message.reply_id != reply.id:
            return
        self.panels.end()
        text = self.session.failed(message.message)  # what it wrote so far stays
        note = f"⚠ {message.message}"
        if message.log_tail:
            note += "\n\nlast log lines:\n" + message.log_tail
        await reply.item.finish(text, note)
        reply.item.add_class("error")
        self.branches.label()
        self.stats_panel.stats = self.stats_panel.stats.but(state="error", stop_reason="error")
        self.set_status(f"error: {message.message}", error=True)
        if message.crashed:
            self.engine = None
            self.session.detach()
            self.notify(
                "The model worker died. Press ctrl+k (or send again) to start a new one.",
                title="Model worker crashed",
                severity="error",
                timeout=10,
            )
        self._end_reply()

    def _end_reply(self) -> None:
        self.last_reply = self.reply
        self.reply = None
        self._blink(True)
        self.call_after_refresh(settle_gc)

    def _blink(self, on: bool) -> None:
        if self.cadence.budget is not None:
            self.query_one("#prompt", PromptInput).cursor_blink = on
