"""The next token's best candidates ranked in a few numpy passes, and what a step keeps of them."""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Mapping, Sized
from math import exp, log
from typing import Protocol

import numpy as np

from chatapp.engine.candidate_rows import (
    Candidate,
    Candidates,
    StepFacts,
    candidate_rows,
    chain_cuts,
)
from chatapp.sampling import SamplerSettings, repeat_penalized

# How many candidates are ranked per step (more than are shown, so cuts are exact in practice).
RANKED = 64
# Block size for the threshold search in rank(): the m-th largest block maximum bounds the
# m-th largest logit from below, so one comparison against it keeps every top-m token.
BLOCK = 64

_SCRATCH: dict[int, np.ndarray] = {}


class RecentWindow(Container[int], Sized, Protocol):
    """The penalty window (row_sampling.RecentTokens): its tokens' counts."""

    counts: Mapping[int, int]


def _scratch(n: int) -> np.ndarray:
    """A reused n_vocab-sized buffer: fresh 200 KB temporaries cost page faults on every token.
    Only the worker's token loop (one thread) calls this."""
    buf = _SCRATCH.get(n)
    if buf is None:
        buf = _SCRATCH[n] = np.empty(n, dtype=np.float32)
    return buf


class _Row:
    """What rank() needs for one logits row, made once per row: the block grid (a view), the
    block maxima and the comparison mask (written in place). The worker hands out the same
    view object for the same row buffer on every token, so these are looked up by its id."""

    __slots__ = ("logits", "grid", "maxima", "mask")

    def __init__(self, logits: np.ndarray, blocks: int) -> None:
        self.logits = logits  # held, so its id is not reused while this entry lives
        self.grid = logits[: blocks * BLOCK].reshape(BLOCK, blocks)
        self.maxima = np.empty(blocks, dtype=logits.dtype)
        self.mask = np.empty(logits.shape[0], dtype=bool)


_ROWS: dict[int, _Row] = {}


def _row(logits: np.ndarray, blocks: int) -> _Row:
    row = _ROWS.get(id(logits))
    if row is None or row.logits is not logits:
        if len(_ROWS) > 64:
            _ROWS.clear()
        row = _ROWS[id(logits)] = _Row(logits, blocks)
    return row


def log_normalizer(logits: np.ndarray, top: float) -> float:
    """log(sum(exp(logits))) computed around the maximum `top`, without temporaries."""
    buf = _scratch(logits.shape[0])
    if -50.0 < top < 70.0:  # exp(logits) itself neither overflows nor loses the largest terms
        np.exp(logits, out=buf)  # (one pass fewer than subtracting the maximum first)
        return log(buf.sum())
    np.subtract(logits, np.float32(top), out=buf)
    np.exp(buf, out=buf)
    return top + log(buf.sum())  # float32 pairwise sum of values <= 1: exact enough


def ranked_size(settings: SamplerSettings, top_n: int, n_vocab: int, banned: int = 0) -> int:
    """How many of the best tokens to rank so that the top-k after penalties lies among them.

    Penalties (and `banned` tokens, biased to -inf) only lower logits, but they can push ranked
    tokens below unranked ones. With k + (tokens that can be lowered) ranked, at least k ranked
    tokens keep their logits, and each of those beats every unranked token.
    """
    lowered = banned
    if settings.repeat_penalty != 1.0:
        lowered += settings.repeat_last_n
    k = 1 if settings.greedy else settings.top_k
    return min(max(top_n, RANKED, k + lowered if k > 0 else 0), n_vocab)


def rank(logits: np.ndarray, m: int, normalize: bool = True) -> tuple[np.ndarray, float]:
    """Ids of at least the m largest logits (unordered; a few more when they tie with the
    threshold below) and log(sum(exp(logits))) (nan when not `normalize`), in a few passes.

    The threshold is the m-th largest of the maxima of n/BLOCK groups: at least m logits
    reach it, and usually only a few more, so no partition of the whole vocabulary is needed
    (a full argpartition of 49k logits costs ~0.4 ms). Every numpy call counts: this runs
    right after a decode, with the caches cold, where each costs ~20 us, so the few extra
    tokens are kept rather than cut with three more calls (the samplers are exact on any set
    that holds the m best).
    """
    n = logits.shape[0]
    blocks = n // BLOCK
    if m >= n or blocks < m:
        log_z = log_normalizer(logits, float(logits.max())) if normalize else float("nan")
        sel = np.argpartition(logits, n - m)[n - m :] if m < n else np.arange(n)
        return sel, log_z
    # Groups of BLOCK logits, strided (column maxima of a row-major reshape are the fast ones);
    # the buffers are the row's own, so no call allocates.
    row = _row(logits, blocks)
    maxima = row.maxima
    np.max(row.grid, axis=0, out=maxima)
    # One in-place partition places both the m-th largest group maximum and the largest.
    maxima.partition((blocks - m, blocks - 1))
    threshold = maxima[blocks - m]
    if normalize:
        top = float(maxima[blocks - 1])
        if n > blocks * BLOCK:
            top = max(top, float(logits[blocks * BLOCK :].max()))
        log_z = log_normalizer(logits, top)
    else:
        log_z = float("nan")
    sel = np.greater_equal(logits, threshold, out=row.mask).nonzero()[0]
    if sel.shape[0] > 4 * m:  # many ties (a flat row): cut to m after all
        sel = sel[np.argpartition(logits[sel], sel.shape[0] - m)[sel.shape[0] - m :]]
    return sel, log_z


def top_candidates(
    logits: np.ndarray,
    settings: SamplerSettings,
    recent: Collection[int],
    top_n: int,
    piece: Callable[[int], bytes],
    idx: np.ndarray | None = None,
    log_z: float | None = None,
    allowed: np.ndarray | None = None,
    vocab: np.ndarray | None = None,
) -> tuple[Candidate, ...]:
    """The candidate rows of one step, made now (candidate_rows.candidate_rows over the ranked
    tokens): for the steps whose facts alone cannot make them later, top-k off (the kept set
    reaches past the ranked tokens: `vocab` is then the row the chain sees, `logits` or a
    grammar's masked copy) or a grammar (`allowed` says which of `idx` it allows; the caller
    ranks enough allowed tokens for top-k: engine/local/loop/grammar_sampler.py).
    """
    if idx is None or log_z is None:
        idx, log_z = rank(logits, ranked_size(settings, top_n, logits.shape[0]))
    whole = None
    if vocab is not None:
        row_log_z = None if allowed is not None else log_z  # (a grammar's mask changes it)
        whole = lambda ids: vocab_cuts(vocab, ids, recent, settings, row_log_z)  # noqa: E731
    return candidate_rows(
        idx,
        logits[idx],
        log_z,
        settings,
        recent,
        top_n,
        lambda i: piece(int(idx[i])),
        allowed=allowed,
        vocab_cuts=whole,
    )


_PENALIZED: dict[int, np.ndarray] = {}


def vocab_cuts(
    vocab: np.ndarray, ids0: np.ndarray, recent, settings: SamplerSettings, log_z: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """candidate_rows' cuts and after-samplers probabilities of the tokens `ids0` where the
    chain sees the whole vocabulary (`vocab`: -inf where a grammar cuts; `log_z` its
    log-normalizer, None when a grammar masks it): chain_cuts over the best few hundred after
    the penalties, sorted, more while the rest below them comes through (a sort of the whole
    vocabulary costs ms)."""
    rp = settings.repeat_penalty
    window = np.fromiter(recent, dtype=np.int64) if rp != 1.0 and recent else None
    pen = vocab
    if window is not None and window.shape[0]:
        kept = _PENALIZED.get(vocab.shape[0])  # (one buffer: rank's row cache keeps its grid)
        if kept is None:
            kept = _PENALIZED[vocab.shape[0]] = np.empty_like(vocab)
        pen = kept
        np.copyto(pen, vocab)
        pen[window] = repeat_penalized(pen[window], rp)
    n = pen.shape[0]
    top = float(pen.max())
    if log_z is None:
        total = float(np.exp(pen - np.float32(top), dtype=np.float64).sum())
    else:  # the row's normalizer, the window's tokens moved to their lowered logits
        total = exp(log_z - top)
        if pen is not vocab:
            was, now = vocab[window].astype(np.float64), pen[window].astype(np.float64)
            total += float(np.exp(now - top).sum() - np.exp(was - top).sum())
    m = max(256, ids0.shape[0])
    while True:
        m = min(m, n)
        head = rank(pen, m, normalize=False)[0] if m < n else np.arange(n)
        head = head[np.argsort(-pen[head], kind="stable")]
        logits = pen[head].astype(np.float64)
        rest = max(1e-300, total - float(np.exp(logits - top).sum())) if m < n else 0.0
        cut, final, rest_cut = chain_cuts(logits, settings, rest)
        if rest_cut >= 0 or m == n:
            break
        m *= 4
    place = {t: j for j, t in enumerate(head.tolist())}
    at = np.array([place.get(t, len(place)) for t in ids0.tolist()])  # (past them: the rest)
    cut_of = np.append(cut, np.int8(rest_cut))[at]
    cut_of[~np.isfinite(vocab[ids0])] = -1
    return cut_of, np.append(final, 0.0)[at]


def step_facts(
    logits: np.ndarray,
    idx: np.ndarray,
    log_z: float,
    settings: SamplerSettings,
    recent: RecentWindow,
    top_n: int,
    piece: Callable[[int], bytes],
    raw: np.ndarray | None = None,
) -> Candidates:
    """What a step keeps for its candidate rows (candidate_rows.StepFacts), the rows made only
    when shown: the ranked tokens best first with their logits, which of them the penalty
    lowers, and the pieces of the first top_n + that many. Exact where top-k or greedy bounds
    the kept set (row_sampling.subset_exact); elsewhere use top_candidates.

    Only what the next decode would overwrite or the next token would change is taken now
    (the ranked tokens' raw logits, `raw` when the caller has them, and the penalty window);
    the rest waits in a StepCapture until the step is sent."""
    if raw is None:
        raw = logits[idx]
    window = recent.counts.keys() if settings.repeat_penalty != 1.0 and len(recent) else ()
    return Candidates(StepCapture(idx, raw, log_z, settings, top_n, frozenset(window), piece))


class StepCapture:
    """One step's facts as taken between two decodes (step_facts), put in order on settle():
    right after a decode every numpy call runs with the caches cold (~20 us each, 2-core
    EPYC), so the sort, the conversions and the piece lookups wait for the batch send."""

    __slots__ = ("idx", "raw", "log_z", "settings", "top_n", "window", "piece", "count")

    def __init__(self, idx, raw, log_z, settings, top_n, window, piece) -> None:
        self.idx, self.raw, self.log_z = idx, raw, log_z
        self.settings, self.top_n, self.window, self.piece = settings, top_n, window, piece
        self.count = idx.shape[0]

    def settle(self) -> StepFacts:
        raw = self.raw
        order = np.argsort(-raw, kind="stable")  # ties in id order, as top_candidates has them
        ids = self.idx[order].astype(np.int32)
        ids_list = ids.tolist()
        lowered = self.window & frozenset(ids_list) if self.window else frozenset()
        shown = ids_list[: self.top_n + len(lowered)]
        return StepFacts(
            ids.tobytes(),
            raw[order].tobytes(),
            self.log_z,
            self.settings,
            self.top_n,
            lowered,
            tuple(map(self.piece, shown)),
        )


def token_logprob(logits: np.ndarray, token: int, log_z: float) -> float:
    """Raw log-probability of one token."""
    return float(logits[token]) - log_z
