"""llama.cpp's grammar sampler in the token loop: the grammar masks, then the usual chain picks.

The grammar comes first (as in llama.cpp's common sampler when it resamples): top-k, top-p,
min-p and temperature act on the tokens it allows. It runs on the ranked candidates first
(~20 us for a hundred tokens); that is exact when at least top-k (1 when greedy) of them are
allowed and untouched by the penalties (each such one beats every unranked token, which
only has lower logits). Otherwise, and always when it rejects every ranked token, it runs on
the whole vocabulary (a few ms). Only a token the grammar allowed is ever accepted into it.
"""

from __future__ import annotations

import ctypes
import os
from math import inf
from typing import TYPE_CHECKING

import numpy as np

from chatapp.engine.local.loop.candidates import rank, token_logprob, top_candidates
from chatapp.engine.protocol import GenerateRequest, Grammar

if TYPE_CHECKING:
    from chatapp.engine.local.load.loaded_model import LoadedModel
    from chatapp.sampling import SamplerSettings

DTYPE = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])  # llama_token_data


class GrammarUnusable(Exception):
    """llama.cpp could not parse the grammar; str() says why, in one sentence."""


def _log_reason() -> str:
    """llama.cpp's own words on a grammar it refused (it logs them to fd 2: the worker's log)."""
    try:
        path = os.readlink("/proc/self/fd/2")
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - 4096))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    found = [ln for ln in lines if "error parsing grammar" in ln]
    return found[-1].split("error parsing grammar:", 1)[-1].strip() if found else ""


class GrammarSampler:
    """The grammar's state for one reply (one per sequence when several are decoded)."""

    def __init__(self, w: LoadedModel, grammar: Grammar, banned=()) -> None:
        self.lib = w.lib
        self.n_vocab = w.n_vocab
        self.source = grammar.source or "the grammar"
        self.smpl = w.lib.llama_sampler_init_grammar(w.vocab, *self._c_text(grammar))
        if not self.smpl:
            reason = _log_reason()
            raise GrammarUnusable(
                f"llama.cpp cannot parse {self.source}"
                + (f": {reason}" if reason else " (the worker log says where)")
            )
        self.banned = frozenset(banned)  # tokens the chain bans (EOG when ignoring it)
        self.sub, self.sub_arr = self._buffer(256)
        self.full: np.ndarray | None = None  # the whole vocabulary's buffer, made on first need
        self.masked = np.empty(0, dtype=np.float32)
        self.one, self.one_arr = self._buffer(1)
        self.full_passes = 0  # steps that needed the whole vocabulary (speed notes, tests)
        self.steps = 0

    def _c_text(self, grammar: Grammar) -> tuple[bytes, bytes]:
        """The grammar and its root as C strings (a NUL would cut the grammar short)."""
        try:
            gbnf, root = grammar.gbnf.encode("utf-8"), grammar.root.encode("utf-8")
        except UnicodeEncodeError:
            raise GrammarUnusable(f"{self.source} is not text (a lone surrogate)") from None
        if b"\0" in gbnf or b"\0" in root:
            raise GrammarUnusable(f"{self.source} holds a NUL character")
        return gbnf, root

    def _buffer(self, n: int):
        buf = np.zeros(n, dtype=DTYPE)
        arr = self.lib.llama_token_data_array()
        arr.data = buf.ctypes.data_as(ctypes.POINTER(self.lib.llama_token_data))
        return buf, arr

    def _apply(self, sampler, arr, n: int) -> None:
        arr.size = n
        arr.selected = -1
        arr.sorted = False
        self.lib.llama_sampler_apply(sampler, ctypes.byref(arr))

    def allowed(self, logits: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Which of the ranked tokens `idx` the grammar allows now (a bool array)."""
        n = idx.shape[0]
        if n > self.sub.shape[0]:
            self.sub, self.sub_arr = self._buffer(n)
        self.sub["id"][:n] = idx
        self.sub["logit"][:n] = 0.0
        self._apply(self.smpl, self.sub_arr, n)
        return np.isfinite(self.sub["logit"][:n])

    def mask_all(self, logits: np.ndarray) -> np.ndarray:
        """The logits with -inf where the grammar rejects the token (the whole vocabulary)."""
        if self.full is None:
            self.full, self.full_arr = self._buffer(self.n_vocab)
            self.ids = np.arange(self.n_vocab, dtype=np.int32)
            self.masked = np.empty(self.n_vocab, dtype=np.float32)
        full = self.full
        full["id"] = self.ids
        full["logit"] = logits
        self._apply(self.smpl, self.full_arr, self.n_vocab)
        np.copyto(self.masked, full["logit"])
        self.full_passes += 1
        return self.masked

    def pick_all(self, chain) -> int:
        """The chain's token among what mask_all() left; -1 when it left nothing the chain
        would take (the grammar is complete and only the banned end-of-generation remains)."""
        if not np.isfinite(self.masked).any():
            return -1
        self._apply(chain, self.full_arr, self.n_vocab)  # (the chain may reorder the buffer)
        sel = self.full_arr.selected
        full = self.full
        tok = int(full["id"][sel]) if full is not None and 0 <= sel < self.n_vocab else -1
        if tok < 0 or not np.isfinite(self.masked[tok]):
            return -1
        self.lib.llama_sampler_accept(chain, tok)
        return tok

    def allows(self, tok: int) -> bool:
        """Whether the grammar allows `tok` next (continue / rewind check their prefix)."""
        self.one["id"][0] = tok
        self.one["logit"][0] = 0.0
        self._apply(self.smpl, self.one_arr, 1)
        return bool(np.isfinite(self.one["logit"][0]))

    def accept(self, tok: int) -> None:
        """The token was sampled (only ever one the grammar allowed: llama.cpp aborts on
        another)."""
        self.lib.llama_sampler_accept(self.smpl, tok)
        self.steps += 1

    def enough(self, idx: np.ndarray, ok: np.ndarray, s: SamplerSettings, recent) -> bool:
        """Whether sampling among the ranked tokens equals sampling the whole vocabulary: at
        least top-k (1 when greedy) of them allowed and not lowered by a penalty or a ban."""
        need = 1 if s.greedy else s.top_k
        if need <= 0:
            return False
        penalized = s.repeat_penalty != 1.0
        count = 0
        for tok in idx[ok].tolist():
            if tok in self.banned or (penalized and tok in recent):
                continue
            count += 1
            if count >= need:
                return True
        return False

    def free(self) -> None:
        if self.smpl:
            self.lib.llama_sampler_free(self.smpl)
            self.smpl = None


def start_grammar(w: LoadedModel, req: GenerateRequest, prefix: list[int]):
    """The request's grammar sampler (None without one), fed the reply's given start
    (continue, rewind); GrammarUnusable says why it cannot be used."""
    if req.grammar is None:
        return None
    grammar = GrammarSampler(w, req.grammar, w.eog_tokens() if req.ignore_eos else ())
    for i, tok in enumerate(prefix):
        if not grammar.allows(tok):
            grammar.free()
            piece = w.piece(tok).decode("utf-8", "replace")
            raise GrammarUnusable(
                f"token {i} of the reply so far ({piece!r}) breaks {grammar.source}"
            )
        grammar.accept(tok)
    return grammar


def sample_with_grammar(
    w: LoadedModel,
    chain,
    subset,
    grammar: GrammarSampler,
    row: int,
    s: SamplerSettings,
    recent,
    m: int,
    top_n: int,
    exact: bool,
):
    """sample_row (row_sampling.py) under a grammar: the token (-1 when the grammar allows nothing
    more), the candidates with the grammar's cut, the token's raw log-probability. `exact`:
    whether the ranked subset suffices without a grammar (row_sampling.subset_exact)."""
    logits = w.logits(row)
    idx, log_z = rank(logits, m, top_n > 0)
    ok = grammar.allowed(logits, idx)
    masked = None
    if exact and grammar.enough(idx, ok, s, recent):
        subset.fill(logits, idx)
        subset.logits[: idx.shape[0]][~ok] = -inf
        tok = subset.pick(chain)
    else:
        masked = grammar.mask_all(logits)
        tok = grammar.pick_all(chain)
    if tok >= 0:
        grammar.accept(tok)
    cands: tuple = ()
    if top_n > 0:
        cands = grammar_candidates(w, logits, idx, ok, log_z, masked, s, recent, m, top_n)
    logprob = token_logprob(logits, tok, log_z) if top_n > 0 and tok >= 0 else None
    return tok, cands, logprob


def grammar_candidates(w, logits, idx, ok, log_z, masked, s, recent, m, top_n):
    """The candidates to show, each marked when the grammar cut it. When the whole vocabulary
    was masked, the best allowed tokens join the ranked ones (top-k then acts on them)."""
    if masked is None:
        return top_candidates(logits, s, recent, top_n, w.piece, idx=idx, log_z=log_z, allowed=ok)
    finite = np.isfinite(masked)
    if not finite.any():
        return top_candidates(logits, s, recent, top_n, w.piece, idx=idx, log_z=log_z, allowed=ok)
    best_allowed, _ = rank(masked, min(m, int(finite.sum())), False)
    extra = np.setdiff1d(best_allowed[finite[best_allowed]], idx, assume_unique=True)
    both = np.concatenate([idx, extra])
    allowed = np.concatenate([ok, np.ones(extra.shape[0], dtype=bool)])
    return top_candidates(
        logits, s, recent, top_n, w.piece, idx=both, log_z=log_z, allowed=allowed, vocab=masked
    )
