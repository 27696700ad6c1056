"""The state of one reply in the UI: its tokens, live rates, and the footer once done."""

from __future__ import annotations

from dataclasses import dataclass, field

from chatapp.chat.session import ReplyDraft
from chatapp.engine.protocol import Finished, ModelInfo, Token
from chatapp.sampling import SamplerSettings
from chatapp.stats_text import stats_footer
from chatapp.ui.widgets.chat import MessageView


@dataclass
class Reply:
    """A reply being streamed (or the last one, kept for rewind and the token cursor)."""

    id: int
    item: MessageView
    submitted: float  # perf_counter at submit (the engine's clock is the same monotonic one)
    tokens: list[Token] = field(default_factory=list)
    first_paint_s: float | None = None
    finished: Finished | None = None
    settings_changes: list[tuple[int, SamplerSettings]] = field(default_factory=list)
    speeds: list[float] = field(default_factory=list)
    shown_thinking: int = 0  # characters of the reasoning / the answer on screen
    shown_answer: int = 0
    note: str = ""  # what the status line says with it (the messages the model no longer sees)

    def __post_init__(self) -> None:
        self.prefix_ids = [t.id for t in self.tokens]
        self._first_t: float | None = None

    def add(self, tokens: list[Token]) -> None:
        for tok in tokens:
            if self.tokens and self._first_t is not None:
                gap = tok.t - self.tokens[-1].t
                if gap > 0:
                    self.speeds.append(1.0 / gap)
            if self._first_t is None:
                self._first_t = tok.t
                self._n_at_first = len(self.tokens)
            self.tokens.append(tok)

    @property
    def ttft_s(self) -> float | None:
        return None if self._first_t is None else self._first_t - self.submitted

    @property
    def decode_tps(self) -> float | None:
        if self._first_t is None:
            return None
        n = len(self.tokens) - self._n_at_first
        span = self.tokens[-1].t - self._first_t
        return (n - 1) / span if n > 1 and span > 0 else None

    def settings_at(self, index: int, default: SamplerSettings) -> SamplerSettings:
        """The sampler settings that token `index` was sampled with."""
        chosen = self.initial_settings or default
        for at, settings in self.settings_changes:
            if at <= index:
                chosen = settings
        return chosen

    initial_settings: SamplerSettings | None = None

    async def show_text(self, draft: ReplyDraft) -> None:
        """The reply's new text: reasoning into its block (open while the model thinks), the
        answer below it (the block folds when the answer begins)."""
        split = draft.split
        thinking = split.thinking[self.shown_thinking :]
        answer = split.answer[self.shown_answer :]
        if thinking:
            self.shown_thinking = len(split.thinking)
            await self.item.write_thinking(thinking, f"Thinking… {draft.thinking_tokens} tokens")
        if answer:
            if self.shown_answer == 0 and split.closed:
                self.item.fold_thinking(self.thinking_label(draft))
            self.shown_answer = len(split.answer)
            await self.item.write(answer)

    def thinking_label(self, draft: ReplyDraft) -> str:
        return thinking_label(draft, self)


def footer_for(ev: Finished, reply: Reply, info: ModelInfo | None) -> str:
    """The stats line under a finished reply."""
    st = ev.stats
    changed = reply.settings_changes
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


def thinking_label(draft: ReplyDraft, reply: Reply) -> str:
    """The folded reasoning's line: its tokens, its time, and when the answer began."""
    parts = [f"Thinking · {draft.thinking_tokens} tokens"]
    new = reply.tokens[len(reply.prefix_ids) :]
    if draft.first_answer_t is not None and new:
        parts.append(f"{draft.first_answer_t - new[0].t:.1f} s")
        parts.append(f"answer after {(draft.first_answer_t - reply.submitted) * 1000:.0f} ms")
    return " · ".join(parts)
