"""Draft tokens for speculative decoding: n-gram lookup in the text so far, or a draft model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from chatapp.engine.local.loaded_model import LoadedModel

NGRAM_MAX = 4  # the longest n-gram looked up (longer matches are tried first)
NGRAM_MIN = 2  # the shortest: a single token repeats too often to predict anything
DRAFT_MAX = 16  # the most tokens one draft proposes
PRIOR_ACCEPT = (3.0, 4.0)  # (accepted, compared): a new reply's drafts start at 75%
FORGET = 0.9  # each new observation of acceptance weighs this much more than the one before
# A batch's cost in one-row decodes before this model is measured here: 1 + 0.85 (rows - 1)^0.7
# (the 2-core EPYC with the bundled model: 2 rows 1.85, 4 rows 2.72, 8 rows 4.18, 16 rows 7.09);
# once some row count is measured, the curve is scaled to it (a GPU's batches cost far less).
PRIOR_ROW, PRIOR_EXP = 0.85, 0.7
WORTH = 1.05  # a draft must promise 5% more tokens per second than none, or none is drafted


class DraftPolicy:
    """How many tokens to draft next: the length k that maximises the tokens a batch is
    expected to yield over what it costs, or 0 when no length beats one token at a time.

    A draft of k tokens, each accepted with chance a (the reply's own rate so far), yields
    (1 - a^(k+1)) / (1 - a) tokens; its batch of k + 1 rows costs what this model measured on
    this CPU (a batch of rows is far from free on a CPU: 2 rows cost ~1.85 and 16 rows ~7
    one-row decodes on the 2-core EPYC with the bundled model), plus what proposing cost (a
    draft model's own decodes). Lookups made while not drafting are still compared with the
    tokens that came, so a text that turns repetitive is noticed."""

    def __init__(self, costs: dict[int, float] | None = None, high: int = DRAFT_MAX) -> None:
        self.hits, self.trials = PRIOR_ACCEPT
        self.costs = {} if costs is None else costs  # rows -> seconds (shared per model)
        self.propose_s = 0.0  # seconds per proposed token (a draft model's decodes)
        self.high = high

    @property
    def accept(self) -> float:
        return self.hits / self.trials

    def observe(self, accepted: int, compared: int) -> None:
        """Drafted tokens compared with what was sampled, and how many of them matched."""
        for i in range(compared):
            self.hits = self.hits * FORGET + (1.0 if i < accepted else 0.0)
            self.trials = self.trials * FORGET + 1.0

    def timed(self, rows: int, seconds: float) -> None:
        """A decode of `rows` rows took `seconds` (a running average per row count)."""
        old = self.costs.get(rows)
        self.costs[rows] = seconds if old is None else 0.8 * old + 0.2 * seconds

    def proposed(self, tokens: int, seconds: float) -> None:
        if tokens > 0:
            self.propose_s = 0.8 * self.propose_s + 0.2 * seconds / tokens

    def cost(self, rows: int) -> float:
        """A batch of `rows` rows in one-row decodes: measured, else the prior curve scaled to
        the nearest measured row count, else the prior curve."""
        one = self.costs.get(1)
        if not one:
            return _prior(rows)
        if rows in self.costs:
            return self.costs[rows] / one
        known = [r for r in self.costs if r > 1]
        if not known:
            return _prior(rows)
        near = min(known, key=lambda r: abs(r - rows))
        return _prior(rows) * (self.costs[near] / one) / _prior(near)

    def length(self, room: int) -> int:
        """Tokens to draft now (0: decode one token at a time)."""
        a = min(self.accept, 0.999)
        best_k, best = 0, WORTH
        one = self.costs.get(1) or 0.0
        for k in range(1, min(room, self.high) + 1):
            expected = (1.0 - a ** (k + 1)) / (1.0 - a)
            proposing = k * self.propose_s / one if one else 0.0
            gain = expected / (self.cost(k + 1) + proposing)
            if gain > best:
                best_k, best = k, gain
        return best_k


def _prior(rows: int) -> float:
    return 1.0 + PRIOR_ROW * (rows - 1) ** PRIOR_EXP


class NgramDrafter:
    """Prompt lookup: the tokens that followed the latest earlier occurrence of the text's last
    n tokens (n from NGRAM_MAX down to NGRAM_MIN), in the prompt and the reply so far.

    The index maps each n-gram whose next token is known to where that token is; it grows by
    one entry per n as tokens are appended, so a lookup costs a few dict probes.
    """

    name = "ngram"

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.index: dict[tuple[int, ...], int] = {}

    def reset(self, tokens: list[int]) -> None:
        self.tokens = []
        self.index = {}
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        seq = self.tokens
        for tok in tokens:
            p = len(seq)
            for n in range(NGRAM_MIN, NGRAM_MAX + 1):
                if p >= n:
                    self.index[tuple(seq[p - n : p])] = p  # this n-gram is followed by seq[p]
            seq.append(tok)

    def sync(self, tokens: list[int]) -> None:
        """Follow the target's tokens: append what is new (the usual case), or start over
        when they do not extend what was seen (a new reply, a rewind)."""
        n = len(self.tokens)
        if len(tokens) >= n and tokens[:n] == self.tokens:
            self.extend(tokens[n:])
        else:
            self.reset(tokens)

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to k tokens expected to follow `tokens`."""
        self.sync(tokens)
        seq = self.tokens
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if len(seq) <= n:
                continue
            at = self.index.get(tuple(seq[-n:]))
            if at is not None:
                return seq[at : at + k]
        return []


class ModelDrafter:
    """A smaller model with the same vocabulary drafts greedily; its KV cache follows the
    target's tokens (the common prefix is kept, rejected drafts are dropped)."""

    name = "model"

    def __init__(self, worker: LoadedModel) -> None:
        self.w = worker

    def propose(self, tokens: list[int], k: int) -> list[int]:
        w = self.w
        room = w.n_ctx - len(tokens) - 1
        k = min(k, room)
        if k <= 0:
            return []
        n = w.reuse_prefix(tokens)
        if w.decode(tokens[n:-1]) or w.decode_one(tokens[-1]):
            w.lib.llama_memory_clear(w.mem, True)
            w.kv_tokens = []
            return []
        drafts: list[int] = []
        for _ in range(k):
            tok = int(np.argmax(w.logits()))
            if w.lib.llama_vocab_is_eog(w.vocab, tok):
                break
            drafts.append(tok)
            if len(drafts) == k or w.decode_one(tok):
                break
        return drafts


def vocab_mismatch(target: LoadedModel, draft: LoadedModel) -> str:
    """Why a draft model cannot draft for the target ('' if it can): the same vocabulary means
    the same size, the same BOS/EOS and the same bytes for every token (a sample is compared)."""
    if draft.n_vocab != target.n_vocab:
        return f"its vocabulary has {draft.n_vocab} tokens, the model's has {target.n_vocab}"
    if (draft.bos_id, draft.eos_id) != (target.bos_id, target.eos_id):
        return "its BOS/EOS tokens differ from the model's"
    step = max(1, target.n_vocab // 997)
    for tok in range(0, target.n_vocab, step):
        if draft.piece(tok) != target.piece(tok):
            return f"token {tok} is {draft.piece(tok)!r} there and {target.piece(tok)!r} here"
    return ""
