"""Draft tokens for speculative decoding: n-gram lookup in the text so far, or a draft model."""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from chatapp.engine.local.load.loaded_model import LoadedModel

NGRAM_MAX = 4  # the longest n-gram looked up (longer matches are tried first)
NGRAM_MIN = 2  # the shortest anywhere: a single token repeats too often to predict anything
NEAR = 24  # after the text leaves the copy it followed, its next tokens are looked for this
# near where it left (an edit replaces a few words and the copy goes on): there one token is
# enough
DRAFT_MAX = 16  # the most tokens one draft proposes
# Acceptance comes in runs: a draft that continues a copy the reply is following is nearly
# always right, the first token of a new lookup far less often. So two chances are kept:
# FIRST, that a draft's first token is right after a miss (or with nothing followed yet), and
# NEXT, that a token is right given the one before it was; (right, compared) as priors.
# The first-token chance starts at 75% and follows the reply quickly; a copy's next token is
# right 90% of the time before anything is seen (on a rewrite it is ~98%, and free-form text
# rarely gets a first token right, so it is rarely asked).
PRIOR_FIRST = (3.0, 4.0)
PRIOR_NEXT = (9.0, 10.0)
FORGET = 0.9  # each new observation of acceptance weighs this much more than the one before
FORGET_FIRST = 0.8  # (first tokens are compared once a draft: fewer observations)
# A batch's cost in one-row decodes before this model is measured here: 1 + 0.85 (rows - 1)^0.7
# (the 2-core EPYC with the bundled model: 2 rows 1.85, 4 rows 2.72, 8 rows 4.18, 16 rows 7.09);
# once some row count is measured, the curve is scaled to it (a GPU's batches cost far less).
PRIOR_ROW, PRIOR_EXP = 0.85, 0.7
WORTH = 1.05  # a draft must promise 5% more tokens per second than none, or none is drafted


class Rate:
    """A chance estimated from outcomes, recent ones weighing more (`forget`)."""

    def __init__(self, prior: tuple[float, float], forget: float = FORGET) -> None:
        self.hits, self.trials = prior
        self.forget = forget

    @property
    def value(self) -> float:
        return self.hits / self.trials

    def observe(self, hit: bool) -> None:
        self.hits = self.hits * self.forget + (1.0 if hit else 0.0)
        self.trials = self.trials * self.forget + 1.0


class DraftPolicy:
    """How many tokens to draft next: the length k that maximises the tokens a batch is
    expected to yield over what it costs, or 0 when no length beats one token at a time.

    A draft's first token is right with chance f (FIRST, or NEXT when the draft continues a
    copy whose last draft was right to its end), each further one with chance a given the one
    before (NEXT): k tokens yield 1 + f (1 - a^k) / (1 - a). Its batch of k + 1 rows costs
    what this model measured on this CPU (a batch of rows is far from free on a CPU: 2 rows
    cost ~1.85 and 16 rows ~7 one-row decodes on the 2-core EPYC with the bundled model), plus
    what proposing cost (a draft model's own decodes). Lookups made while not drafting are
    still compared with the tokens that came, so a text that turns repetitive is noticed."""

    def __init__(self, costs: dict[int, float] | None = None, high: int = DRAFT_MAX) -> None:
        self.first = Rate(PRIOR_FIRST, FORGET_FIRST)
        self.next = Rate(PRIOR_NEXT)
        self.costs = {} if costs is None else costs  # rows -> seconds (shared per model)
        self.propose_s = 0.0  # seconds per proposed token (a draft model's decodes)
        self.high = high
        # length() runs between every two decodes, drafting or not: the batch costs in one-row
        # decodes are kept as a table (remade when a batch is timed anew or a one-row decode
        # drifts 5%), and the last answer is kept for the same inputs.
        self._table: list[float] | None = None
        self._table_one = 0.0
        self._last: tuple = ()
        self._last_k = 0

    def observe(self, accepted: int, compared: int, continuing: bool = False) -> None:
        """A draft's tokens compared with what was sampled, in order, and how many of them
        matched before the first that did not; `continuing`: the draft went on with a copy
        whose previous draft was right to its end."""
        for i in range(compared):
            (self.next if i or continuing else self.first).observe(i < accepted)

    def timed(self, rows: int, seconds: float) -> None:
        """A decode of `rows` rows took `seconds` (a running average per row count)."""
        old = self.costs.get(rows)
        self.costs[rows] = seconds if old is None else 0.8 * old + 0.2 * seconds
        if rows > 1 or old is None:
            self._table = None

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

    def length(self, room: int, continuing: bool = False) -> int:
        """Tokens to draft now (0: decode one token at a time)."""
        a = min(self.next.value, 0.999)
        f = a if continuing else self.first.value
        top = min(room, self.high)
        table = self._cost_table()
        key = (f, a, top, self.propose_s, table)
        if key == self._last:  # (a remade table with the same costs compares equal: same answer)
            return self._last_k
        best_k, best = 0, WORTH
        one = self.costs.get(1) or 0.0
        proposing = self.propose_s / one if one else 0.0
        a_k = 1.0
        for k in range(1, top + 1):
            a_k *= a
            gain = (1.0 + f * (1.0 - a_k) / (1.0 - a)) / (table[k + 1] + k * proposing)
            if gain > best:
                best_k, best = k, gain
        self._last, self._last_k = key, best_k
        return best_k

    def _cost_table(self) -> list[float]:
        """cost(rows) for rows 0..high + 1, kept while the measured costs stand."""
        one = self.costs.get(1) or 0.0
        table = self._table
        if table is None or abs(one - self._table_one) > 0.05 * self._table_one:
            table = self._table = [0.0, *(self.cost(r) for r in range(1, self.high + 2))]
            self._table_one = one
        return table


def _prior(rows: int) -> float:
    return 1.0 + PRIOR_ROW * (rows - 1) ** PRIOR_EXP


class NgramDrafter:
    """Prompt lookup: the tokens that followed an earlier occurrence of the text's last tokens,
    in the prompt and the reply so far.

    A reply that copies (a rewrite, an edit) is followed: while its tokens are those after the
    place its last draft came from, the next draft goes on from there, whatever the latest
    occurrence of the last n-gram is (a text repeats its phrases). When it leaves the copy
    (a replaced word), its next tokens are looked for just after the place it left (NEAR), a
    single token being enough there; elsewhere an occurrence of the last n tokens, n from
    NGRAM_MAX down to NGRAM_MIN: the first after the place the copy was left (a copy moves
    forward, and an edit's phrases repeat: "You must give", "You must cause", "You must
    retain"), else the latest.

    The index maps each n-gram whose next token is known to where that token is, in order; it
    grows by one entry per n as tokens are appended, so a lookup costs a few dict probes and a
    bisection.
    """

    name = "ngram"

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.index: dict[tuple[int, ...], list[int]] = {}
        self.cursor: int | None = None  # where the followed copy's next token is
        self.left: int | None = None  # where the copy was when the text left it
        self.left_when = 0  # how long the text was then

    def reset(self, tokens: list[int]) -> None:
        self.tokens = []
        self.index = {}
        self.cursor = self.left = None
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        seq = self.tokens
        for tok in tokens:
            p = len(seq)
            for n in range(NGRAM_MIN, NGRAM_MAX + 1):
                if p >= n:  # this n-gram is followed by seq[p]
                    self.index.setdefault(tuple(seq[p - n : p]), []).append(p)
            seq.append(tok)

    def sync(self, tokens: list[int]) -> list[int]:
        """Follow the target's tokens: append what is new (the usual case), or start over
        when they do not extend what was seen (a new reply, a rewind). Returns the new ones."""
        n = len(self.tokens)
        # (the seen text's end only: a rewind that kept it costs a wrong guess, never a wrong
        # token, where comparing it all costs ~20 us a step 4,000 tokens deep)
        if len(tokens) >= n and tokens[max(0, n - 16) : n] == self.tokens[-16:]:
            new = tokens[n:]
            self._follow(new, n)
            self.extend(new)
            return new
        self.reset(tokens)
        return []

    def _follow(self, new: list[int], end: int) -> None:
        """Move the cursor over the new tokens while they are the copy's (before `end`, the
        text seen so far); where they part, remember the place and drop the cursor."""
        at = self.cursor
        if at is None:
            return
        for i, tok in enumerate(new):
            if at < end and self.tokens[at] == tok:
                at += 1
            else:
                self.cursor, self.left, self.left_when = None, at, end + i
                return
        self.cursor = at

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to k tokens expected to follow `tokens`."""
        self.sync(tokens)
        seq = self.tokens
        at = self.cursor if self.cursor is not None and self.cursor < len(seq) else None
        if at is None:
            at = self._near() if self.left is not None else None
        if at is None:
            at = self._lookup()
        self.cursor = at
        return seq[at : at + k] if at is not None else []

    def follows(self, tokens: list[int]) -> bool:
        """Whether `tokens` go on with the copy the last draft came from (the next draft then
        continues it)."""
        self.sync(tokens)
        return self.cursor is not None and self.cursor < len(self.tokens)

    def _near(self) -> int | None:
        """Just after the place the copy was left: where the last token (two, when it can)
        comes again within NEAR tokens, the nearest first."""
        seq, start = self.tokens, self.left
        assert start is not None
        stop = min(start + NEAR, len(seq) - 1)
        last, before = seq[-1], seq[-2] if len(seq) > 1 else None
        found = None
        for p in range(start, stop):
            if seq[p] == last:
                if p > 0 and seq[p - 1] == before:
                    return p + 1
                if found is None:
                    found = p + 1
        if found is None and len(seq) - self.left_when > NEAR:
            self.left = None  # gone too far from it: an ordinary lookup from now on
        return found

    def _lookup(self) -> int | None:
        seq = self.tokens
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if len(seq) <= n:
                continue
            found = self.index.get(tuple(seq[-n:]))
            if found:
                if self.left is not None:
                    i = bisect_left(found, self.left)
                    if i < len(found):
                        return found[i]
                return found[-1]
        return None


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
