"""The per-token step every reply loop takes: sample a row, end at EOG, report the Token, stops."""

from __future__ import annotations

import codecs
import time
from typing import TYPE_CHECKING

from chatapp.engine.local.loop.row_sampling import ReplySampler, SubsetSampler, sample_row
from chatapp.engine.protocol import StopReason, Token

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from chatapp.engine.local.load.loaded_model import LoadedModel
    from chatapp.engine.local.loop.grammar_sampler import GrammarSampler
    from chatapp.engine.local.loop.speculation import Speculation


class TokenStep:
    """One reply's token by token: `step(row, settings, m, index)` samples the token from
    logits row `row`, ends the reply at the end of generation (a grammar complete, an EOG
    token) or after a stop string, reports the Token and pushes it to the penalty window.

    It returns the token, or -1 once the reply ended (`reason` and `detail` say why). The text
    decoded so far is `text()`; `times` holds when each token was sampled. The same step serves
    one reply (with its Speculation: a drafted token is flagged, the drafts it turned down
    reported) and each of several decoded side by side (`seq`, no drafts, no stop strings)."""

    __slots__ = (
        "w",
        "send",
        "sampler",
        "subset",
        "grammar",
        "spec",
        "top_n",
        "check_eog",
        "seq",
        "decode",
        "parts",
        "text_len",
        "stops",
        "max_stop",
        "times",
        "drafted",
        "reason",
        "detail",
    )

    def __init__(
        self,
        w: LoadedModel,
        send: Callable[..., None],
        sampler: ReplySampler,
        grammar: GrammarSampler | None,
        top_n: int,
        ignore_eos: bool,
        *,
        spec: Speculation | None,
        prefix: Sequence[int] = (),
        stops: Sequence[str] = (),
        seq: int = 0,
    ) -> None:
        self.w = w
        self.send = send
        self.sampler = sampler
        self.subset = SubsetSampler(w.lib, 256)
        self.grammar = grammar
        self.spec = spec
        self.top_n = top_n
        self.check_eog = not ignore_eos
        self.seq = seq
        self.decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        first = self.decode(b"".join(w.piece(t) for t in prefix))
        self.parts = [first]
        self.text_len = len(first)
        self.stops = tuple(stops)
        self.max_stop = max((len(x) for x in stops), default=0)
        self.times: list[float] = []
        self.drafted = False  # the last token was the draft's (its KV is already in place)
        self.reason = StopReason.MAX_TOKENS
        self.detail = ""

    def text(self) -> str:
        """The reply's text so far (an incomplete UTF-8 tail is left out)."""
        return "".join(self.parts)

    def step(self, row: int, s, m: int, index: int) -> int:
        """Sample, check and report token `index` of the reply from logits row `row`."""
        w, sampler = self.w, self.sampler
        tok, cands, logprob = sample_row(
            w, sampler.chain, self.subset, row, s, sampler.recent, m, self.top_n, self.grammar
        )
        t_tok = time.perf_counter()
        if tok < 0:  # a grammar that allows nothing more (its end, the EOG banned)
            self.reason, self.detail = StopReason.EOG, "the grammar is complete"
            return -1
        if self.check_eog and w.lib.llama_vocab_is_eog(w.vocab, tok):
            self.reason = StopReason.EOG
            return -1
        spec = self.spec
        drafted, rejected = spec.check(tok) if spec is not None else (False, ())
        self.drafted = drafted
        self.times.append(t_tok)
        piece = w.piece(tok)
        delta = self.decode(piece)
        parts = self.parts
        parts.append(delta)
        self.text_len += len(delta)
        seq = self.seq
        self.send(
            Token(index, tok, piece, delta, t_tok, logprob, cands, drafted, rejected, seq),
            flush=index == 0 and seq == 0,
        )
        sampler.recent.push(tok)
        if self.stops and self._stopped(len(delta)):
            return -1
        return tok

    def _stopped(self, n_delta: int) -> bool:
        """Whether a stop string ended in the text the last token added; the text is cut
        where it begins."""
        text = "".join(self.parts)
        self.parts = [text]
        start = max(0, self.text_len - n_delta - self.max_stop)
        window = text[start:]
        stops = self.stops
        hit = min((p for p in (window.find(x) for x in stops) if p >= 0), default=-1)
        if hit < 0:
            return False
        self.parts = [text[: start + hit]]
        self.reason = StopReason.STOP_STRING
        self.detail = next(x for x in stops if window.find(x) == hit)
        return True
