"""Speculative decoding's bookkeeping for one reply: draft, verify in one batch, keep or drop."""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING

from chatapp.engine.local.loop.draft_policy import DraftPolicy

PROBE_EVERY = 32  # tokens a draft model goes without drafting before it tries again
PROBE_LENGTH = 4

if TYPE_CHECKING:
    from chatapp.engine.local.load.loaded_model import LoadedModel

# What batches cost each loaded model here, per thread count (the thread governor changes the
# count mid-reply when another program takes a core): threads -> rows -> seconds.
BATCH_COSTS: weakref.WeakKeyDictionary[LoadedModel, dict[int, dict[int, float]]] = (
    weakref.WeakKeyDictionary()
)


class Speculation:
    """Decodes each new token together with the drafts that may follow it, so one batched
    `llama_decode` yields logits for several positions; the token loop then samples position
    by position from those rows.

    The rule that keeps the model's own distribution: at each row the token is *sampled as
    usual* (the same chain, the same random draws) and compared with the draft for that
    position. Equal: the draft is accepted, and the next row (computed with it as input) is
    valid. Different: the sampled token stands, the rest of the draft is dropped from the KV
    cache, and the next batch starts from it. Drafts here are deterministic (greedy or looked
    up), i.e. a point mass q = 1[d]; for those, speculative sampling's accept-with-p(d)/q(d)
    rule and its residual distribution reduce to exactly this (speculative_probs() is the
    general rule; tests/unit/test_speculation.py checks both on fixed logits). The samplers'
    state (the penalty window, a grammar, the random draws) sees only the tokens taken. Greedy
    and seeded output is the same token for token as decoding without drafts wherever
    llama.cpp's batched rows equal its one-token rows: on the CPU with exact batches, which a
    reply that drafts turns on (llama_open.exact_batches_possible;
    tests/engine/test_exact_drafts.py); elsewhere (a GPU, k-quant weights, `exact_batches`
    false) the outputs can part where two candidates are close.
    """

    def __init__(self, worker: LoadedModel, drafter) -> None:
        self.w = worker
        self.drafter = drafter
        self.drafts: list[int] = []  # the drafts decoded in the current batch
        self.row = -1  # logits row the next token is sampled from (-1: the last decode's one)
        self.threads = -1
        self.policy = DraftPolicy()
        self.shadow: list[int] = []  # a lookup not drafted: compared with what comes
        self.shadow_compared = 0  # of its tokens so far
        self.shadow_basis = ""  # how its place was found
        self.basis = ""  # how the current batch's draft's place was found
        self.since_draft = PROBE_EVERY  # a draft model probes at once, then when idle this long
        self.proposed = 0  # draft tokens the model checked
        self.accepted = 0
        self.batches = 0

    @property
    def unverified(self) -> int:
        """Draft tokens in the KV cache not yet accepted (they are dropped unless they are)."""
        return len(self.drafts) - self.row if self.drafts else 0

    @property
    def verified(self) -> int:
        """KV-cache tokens that are the prompt and the reply so far."""
        return len(self.w.kv_tokens) - self.unverified

    def check(self, tok: int) -> tuple[bool, tuple[bytes, ...]]:
        """The token just sampled at this row: whether it is the draft's (accepted: its KV is
        in place and the next row is valid), and the drafts it turned down (their bytes)."""
        if not self.drafts or self.row >= len(self.drafts):
            return False, ()
        if tok == self.drafts[self.row]:
            self.accepted += 1
            self.row += 1
            return True, ()
        return False, tuple(self.w.piece(d) for d in self.drafts[self.row :])

    def decode(self, tok: int, left: int) -> int:
        """Put a newly sampled token into the KV cache, with drafts after it when the drafter
        has some (at most `left` - 1: every row yields one token); returns llama_decode's
        code."""
        w = self.w
        self._close_batch()
        if self.drafter is None:  # one token at a time: nothing to weigh
            return w.decode_one(tok)
        self.follow_threads()
        if self.shadow:  # the lookup not drafted last time, against the token that came
            hit = self.shadow[0] == tok
            basis = "copy" if self.shadow_compared else self.shadow_basis
            self.policy.observe(int(hit), 1, basis)
            self.shadow = self.shadow[1:] if hit else []
            self.shadow_compared += 1
        drafts: list[int] = []
        room = min(w.n_ctx - len(w.kv_tokens) - 1, left - 1)
        text = [*w.kv_tokens, tok]  # (a copy of the whole text: made once a step)
        basis_of = getattr(self.drafter, "basis", None)
        basis = basis_of(text) if room > 0 and basis_of is not None else ""
        k = self.policy.length(room, basis) if room > 0 and basis is not None else 0
        self.since_draft += 1
        if k == 0 and self.drafter.name != "ngram" and self.since_draft > PROBE_EVERY:
            k = min(PROBE_LENGTH, room)  # a draft model is only judged by drafting: probe
        if k > 0:
            self.since_draft = 0
            self.shadow = []
            t0 = time.perf_counter()
            drafts = self.drafter.propose(text, k)[:k]
            self.policy.proposed(len(drafts), time.perf_counter() - t0)
        elif basis and not self.shadow:
            self.shadow = self.drafter.propose(text, 4)  # a lookup costs ~µs
            self.shadow_compared, self.shadow_basis = 0, basis
        t0 = time.perf_counter()
        code = w.decode([tok, *drafts], logits_all=True) if drafts else w.decode_one(tok)
        if code != 0:
            return code
        w.lib.llama_synchronize(w.ctx)
        self.policy.timed(1 + len(drafts), time.perf_counter() - t0)
        if drafts:
            self.drafts, self.row = drafts, 0
            self.basis = basis or ""
            self.batches += 1
        return code

    def one_row(self, seconds: float) -> float:
        """The last decode's time as one row's: a batch's divided by what its rows cost in
        one-row decodes here (the thread governor judges the pace of single steps, and a reply
        that drafts makes few of them)."""
        rows = len(self.drafts) + 1 if self.drafts else 1
        return seconds / self.policy.cost(rows) if rows > 1 else seconds

    def follow_threads(self) -> None:
        """The batch costs measured at the thread count decodes run with now."""
        gov = getattr(self.w, "governor", None)
        threads = gov.threads if gov is not None else 0
        if threads != self.threads:
            self.threads = threads
            costs = BATCH_COSTS.setdefault(self.w, {})
            self.policy.use_costs(costs.setdefault(threads, {}))

    def end(self) -> None:
        """The reply ended: drafts it never reached leave the KV cache."""
        self._close_batch()

    def _close_batch(self) -> None:
        if not self.drafts:
            return
        accepted = self.row
        compared = min(len(self.drafts), accepted + 1)
        self.proposed += compared
        self.policy.observe(accepted, compared, self.basis)
        self.w.drop_last(self.unverified)
        self.drafts, self.row = [], -1

    def stats(self) -> dict:
        """GenerationStats fields of the reply's speculation."""
        return {
            "draft": self.drafter.name if self.drafter is not None else "",
            "draft_tokens": self.proposed,
            "draft_accepted": self.accepted,
            "draft_batches": self.batches,
            "exact_batches": self.w.info.exact_batches,
        }


def speculative_probs(p, q, draft: int):
    """Speculative sampling's rule for one draft token d ~ q against the target p (arrays over
    the vocabulary): accept d with probability min(1, p[d]/q[d]); otherwise sample from the
    residual max(0, p - q), normalised. Returns (accept probability, residual distribution);
    the emitted token is then distributed as p exactly (Leviathan et al., 2023)."""
    import numpy as np

    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    accept = 1.0 if q[draft] <= 0 else min(1.0, p[draft] / q[draft])
    residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    residual = residual / total if total > 0 else p
    return accept, residual
