"""The reply being written: its tokens and every fact of them, the one store the pane, the
panels and the history read."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from chatapp.chat.thinking import ThinkingSplitter
from chatapp.engine.protocol import Finished, PromptEvaluated, Token
from chatapp.engine.steering import Steering
from chatapp.models.reply_limits import ReplyLimits
from chatapp.sampling import SamplerSettings


@dataclass(eq=False)  # (one reply is itself: compared by identity, never field by field)
class LiveReply:
    """One reply and every fact of its tokens, the one store of them: the tokens it started
    from (continue, rewind), the tokens as they come, its text cut into reasoning and answer
    (thinking models), the prompt it answers, its rates, the settings each token was sampled
    with, and how it ended. The session writes it; the chat pane, the side panels and the
    history read it."""

    prefix: list[Token] = field(default_factory=list)
    settings: SamplerSettings | None = None  # as it started (None: not known, a branch shown)
    submitted: float = field(default_factory=time.perf_counter)  # the engine's clock is the same
    text: str = ""
    tokens: list[Token] = field(default_factory=list)
    split: ThinkingSplitter = field(default_factory=ThinkingSplitter)
    starts_inside: bool = False  # the prompt opened the reasoning
    thinking_tokens: int = 0
    first_answer_t: float | None = None  # engine clock of the first token after the reasoning
    prompt: PromptEvaluated | None = None
    speeds: list[float] = field(default_factory=list)  # t/s from each new token's gap
    settings_changes: list[tuple[int, SamplerSettings]] = field(default_factory=list)
    steering_changes: list[tuple[int, Steering]] = field(default_factory=list)  # mid-reply
    alternatives: dict[int, list[Token]] = field(default_factory=dict)  # the others', by seq
    first_paint_s: float | None = None  # submit -> first token on screen (the UI's clock)
    finished: Finished | None = None
    limits: ReplyLimits | None = None  # once finished: against this machine's ceilings
    error: str = ""

    def __post_init__(self) -> None:
        self.tokens = list(self.prefix)
        self.text = "".join(t.text for t in self.prefix)
        self.split.feed(self.text)

    def think_from_start(self) -> None:
        """The prompt opened the reasoning: the reply (its prefix too) starts inside it."""
        self.starts_inside = True
        self.split = ThinkingSplitter(inside=True)
        self.split.feed(self.text)

    def extend(self, tokens: Sequence[Token]) -> list[Token]:
        """Tokens arrived; returns those of the reply shown (with several decoded together,
        regenerate x N, the first: the others are kept in `alternatives`)."""
        if any(t.seq for t in tokens):
            for t in tokens:
                if t.seq:
                    self.alternatives.setdefault(t.seq, []).append(t)
            tokens = [t for t in tokens if not t.seq]
        for tok in tokens:
            thinking = self.split.in_thinking or self.split.state == "start"
            self.split.feed(tok.text)
            if thinking and (self.split.in_thinking or self.split.closed):
                self.thinking_tokens += 1  # (the </think> token counts as reasoning)
            elif self.first_answer_t is None and self.split.answer.strip():
                self.first_answer_t = tok.t
            if self.started:
                gap = tok.t - self.tokens[-1].t
                if gap > 0:
                    self.speeds.append(1.0 / gap)
            self.tokens.append(tok)
        self.text += "".join(t.text for t in tokens)
        return list(tokens)

    @property
    def new(self) -> list[Token]:
        """The tokens sampled for this reply (after its prefix)."""
        return self.tokens[len(self.prefix) :]

    @property
    def started(self) -> bool:
        """A token was sampled for it (beyond its prefix)."""
        return len(self.tokens) > len(self.prefix)

    @property
    def ttft_s(self) -> float | None:
        return self.tokens[len(self.prefix)].t - self.submitted if self.started else None

    @property
    def decode_tps(self) -> float | None:
        n = len(self.tokens) - len(self.prefix)
        span = self.tokens[-1].t - self.tokens[len(self.prefix)].t if n > 1 else 0.0
        return (n - 1) / span if span > 0 else None

    @property
    def drafted(self) -> int:
        return sum(t.drafted for t in self.tokens)

    def settings_at(self, index: int, default: SamplerSettings | None = None) -> SamplerSettings:
        """The sampler settings that token `index` was sampled with."""
        chosen = self.settings or default or SamplerSettings()
        for at, settings in self.settings_changes:
            if at <= index:
                chosen = settings
        return chosen
