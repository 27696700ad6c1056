"""The state of one reply in the UI: its tokens, live rates, and the footer once done."""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.chat.live_reply import LiveReply
from chatapp.engine.protocol import Finished, ModelInfo, Token
from chatapp.sampling import SamplerSettings
from chatapp.stats_text import stats_footer
from chatapp.ui.widgets.chat import MessageView


@dataclass
class Reply:
    """A reply on screen (streaming, or the last one, kept for rewind and the token cursor): its
    message and how much of its text is drawn; its tokens and their facts are the session's
    LiveReply (`live`)."""

    id: int
    item: MessageView
    live: LiveReply
    shown_thinking: int = 0  # characters of the reasoning / the answer on screen
    shown_answer: int = 0
    note: str = ""  # what the status line says with it (the messages the model no longer sees)

    @property
    def tokens(self) -> list[Token]:
        return self.live.tokens

    @property
    def finished(self) -> Finished | None:
        return self.live.finished

    def settings_at(self, index: int, default: SamplerSettings) -> SamplerSettings:
        """The sampler settings that token `index` was sampled with."""
        return self.live.settings_at(index, default)

    def thinking_label(self) -> str:
        return thinking_label(self.live)

    async def show_text(self) -> None:
        """The reply's new text: reasoning into its block (open while the model thinks), the
        answer below it (the block folds when the answer begins)."""
        live = self.live
        split = live.split
        thinking = split.thinking[self.shown_thinking :]
        answer = split.answer[self.shown_answer :]
        if thinking:
            self.shown_thinking = len(split.thinking)
            await self.item.write_thinking(thinking, f"Thinking… {live.thinking_tokens} tokens")
        if answer:
            if self.shown_answer == 0 and split.closed:
                self.item.fold_thinking(thinking_label(live))
            self.shown_answer = len(split.answer)
            await self.item.write(answer)


def footer_for(ev: Finished, reply: Reply, info: ModelInfo | None) -> str:
    """The stats line under a finished reply."""
    st = ev.stats
    changed = reply.live.settings_changes
    extra = [f"settings changed at token {changed[0][0]}"] if changed else []
    quant = info.quant if info is not None else None
    return stats_footer(
        quant, st.ttft_s, st.prefill_tps, st.decode_tps, len(reply.tokens), str(ev.reason), extra
    )


def stored_footer(message) -> str:
    """The stats line of a reply loaded from the history database."""
    if message.role != "assistant":
        return ""
    quant = message.model.quant if message.model is not None else None
    extra = [str(message.status)] if message.status != "complete" else []
    return stats_footer(
        quant,
        message.ttft_s,
        message.prefill_tps,
        message.decode_tps,
        message.completion_tokens,
        message.stop_reason,
        extra,
    )


def thinking_label(live: LiveReply) -> str:
    """The folded reasoning's line: its tokens, its time, and when the answer began."""
    parts = [f"Thinking · {live.thinking_tokens} tokens"]
    new = live.new
    if live.first_answer_t is not None and new:
        parts.append(f"{live.first_answer_t - new[0].t:.1f} s")
        parts.append(f"answer after {(live.first_answer_t - live.submitted) * 1000:.0f} ms")
    return " · ".join(parts)
