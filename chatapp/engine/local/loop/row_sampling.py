"""Sampling one token from one logits row: the native chain, its penalty window, the subset."""

from __future__ import annotations

import ctypes
from collections import Counter, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from chatapp.engine.local.loop.candidates import rank, step_facts, token_logprob, top_candidates
from chatapp.engine.local.loop.grammar_sampler import GrammarSampler, sample_with_grammar
from chatapp.engine.protocol import Candidate
from chatapp.sampling import VOCAB, SamplerSettings, native_chain

if TYPE_CHECKING:
    from chatapp.engine.local.load.loaded_model import LoadedModel


def build_chain(w: LoadedModel, s: SamplerSettings, history: list[int], ban_eog: bool):
    """The native sampler chain for these settings (the sampler table's steps, after the EOG
    ban when asked), with the penalties' history accepted."""
    lib = w.lib
    params = lib.llama_sampler_chain_default_params()
    params.no_perf = True
    chain = lib.llama_sampler_chain_init(params)
    if ban_eog:
        eog = w.eog_tokens()
        biases = (lib.llama_logit_bias * len(eog))()
        for i, t in enumerate(eog):
            biases[i].token = t
            biases[i].bias = float("-inf")
        lib.llama_sampler_chain_add(
            chain, lib.llama_sampler_init_logit_bias(w.n_vocab, len(eog), biases)
        )
    for step in native_chain(s):
        args = (w.n_vocab if a is VOCAB else a for a in step.args)
        lib.llama_sampler_chain_add(chain, getattr(lib, step.init)(*args))
    for tok in history[-max(s.repeat_last_n, 1) :]:
        lib.llama_sampler_accept(chain, tok)  # penalties keep their history
    return chain


class RecentTokens:
    """The penalty window (last n tokens) with O(1) membership, as the penalties sampler sees it."""

    def __init__(self, history: list[int], n: int) -> None:
        self.n = n
        self.window: deque[int] = deque(history[-n:] if n else [])
        self.counts = Counter(self.window)

    def push(self, tok: int) -> None:
        if not self.n:
            return
        self.window.append(tok)
        self.counts[tok] += 1
        if len(self.window) > self.n:
            old = self.window.popleft()
            self.counts[old] -= 1
            if not self.counts[old]:
                del self.counts[old]

    def __contains__(self, tok: object) -> bool:
        return tok in self.counts

    def __iter__(self):
        return iter(self.counts)

    def __len__(self) -> int:
        return len(self.window)


class SubsetSampler:
    """Runs the native chain on the best few tokens instead of the whole vocabulary.

    Exact whenever top-k or greedy bounds the kept set and the m best were ranked with room for
    every token the penalties or the EOG ban can lower (candidates.ranked_size). Saves building
    and sorting an n_vocab-sized candidate array on every token.
    """

    DTYPE = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])

    def __init__(self, lib, capacity: int) -> None:
        self.lib = lib
        self._make(capacity)

    def _make(self, capacity: int) -> None:
        """A buffer for `capacity` tokens and llama.cpp's array over it."""
        lib = self.lib
        self.buf = np.zeros(capacity, dtype=self.DTYPE)
        self.ids, self.logits = self.buf["id"], self.buf["logit"]  # field views, made once
        self.arr = lib.llama_token_data_array()
        self.arr.data = self.buf.ctypes.data_as(ctypes.POINTER(lib.llama_token_data))
        self.ref = ctypes.byref(self.arr)

    def sample(self, chain, logits: np.ndarray, idx: np.ndarray, raw=None) -> int:
        self.fill(logits, idx, raw)
        return self.pick(chain)

    def fill(self, logits: np.ndarray, idx: np.ndarray, raw: np.ndarray | None = None) -> None:
        """Put the tokens `idx` and their logits (`raw` = logits[idx] where the caller has
        them) in the buffer (a grammar may then mask it)."""
        n = idx.shape[0]
        if n > self.buf.shape[0]:
            self._make(n)
        self.ids[:n] = idx
        self.logits[:n] = logits[idx] if raw is None else raw
        self.n = n

    def pick(self, chain) -> int:
        """The chain's token among those fill() put in; accepted into the chain."""
        arr = self.arr
        arr.size = self.n
        arr.selected = -1
        arr.sorted = False
        self.lib.llama_sampler_apply(chain, self.ref)
        tok = int(self.ids[arr.selected])
        self.lib.llama_sampler_accept(chain, tok)
        return tok


def subset_exact(s: SamplerSettings, m: int) -> bool:
    """Whether sampling among the m best tokens (m from ranked_size) equals sampling over the
    whole vocabulary."""
    return s.greedy or 0 < s.top_k <= m


def sample_row(
    w: LoadedModel,
    chain,
    subset: SubsetSampler,
    row: int,
    s: SamplerSettings,
    recent,
    m: int,
    top_n: int,
    grammar: GrammarSampler | None = None,
):
    """One token from one logits row: the candidates to report (top_n of them), the token the
    chain picks (among the m ranked when that is exact, else over the whole vocabulary) and
    its log-probability before the samplers (None without candidates). With a grammar: the
    token is -1 when it allows nothing more (engine/local/loop/grammar_sampler.py)."""
    if grammar is not None:
        exact = subset_exact(s, m)
        return sample_with_grammar(w, chain, subset, grammar, row, s, recent, m, top_n, exact)
    logits = w.logits(row)
    idx, log_z = rank(logits, m, top_n > 0)
    cands: Sequence[Candidate] = ()
    if subset_exact(s, idx.shape[0]):
        raw = logits[idx]
        if top_n > 0:  # the facts only: the rows are made where they are shown
            cands = step_facts(logits, idx, log_z, s, recent, top_n, w.piece, raw)
        tok = subset.sample(chain, logits, idx, raw)
    else:  # top-k off: the rows count the unranked tokens the samplers keep, now
        if top_n > 0:
            cands = top_candidates(
                logits, s, recent, top_n, w.piece, idx=idx, log_z=log_z, vocab=logits
            )
        tok = w.lib.llama_sampler_sample(chain, w.ctx, row)
    logprob = token_logprob(logits, tok, log_z) if top_n > 0 else None
    return tok, cands, logprob


class ReplySampler:
    """One reply's native chain and penalty window, made and remade together (new settings
    mid-reply). Reply `seq` of several decoded together samples with seed + seq."""

    def __init__(
        self, w: LoadedModel, s: SamplerSettings, history: list[int], ban_eog: bool, seq: int = 0
    ) -> None:
        self.w = w
        self.ban_eog = ban_eog
        self.seq = seq
        self.chain = None
        self.restart(s, history)

    def restart(self, s: SamplerSettings, history: list[int]) -> None:
        """The chain for settings `s` (the old one freed), both with `history` accepted."""
        self.free()
        settings = s.with_(seed=s.seed + self.seq) if self.seq else s
        self.chain = build_chain(self.w, settings, history, self.ban_eog)
        self.recent = RecentTokens(history, s.repeat_last_n)

    def free(self) -> None:
        if self.chain is not None:
            self.w.lib.llama_sampler_free(self.chain)
            self.chain = None
