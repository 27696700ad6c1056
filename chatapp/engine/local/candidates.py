"""Top candidates of the next token, before and after the sampler chain (numpy, no llama.cpp)."""

from __future__ import annotations

from collections.abc import Callable, Container
from math import exp, fsum, log

import numpy as np

from chatapp.engine.protocol import Candidate
from chatapp.sampling import SamplerSettings

# How many candidates are ranked per step (more than are shown, so cuts are exact in practice).
RANKED = 64
# Block size for the threshold search in rank(): the m-th largest block maximum bounds the
# m-th largest logit from below, so one comparison against it keeps every top-m token.
BLOCK = 64

_SCRATCH: dict[int, np.ndarray] = {}


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


def penalized(raw: list[float], ids: list[int], recent: Container[int], rp: float) -> list[float]:
    """Logits after llama.cpp's repetition penalty: positive ones divided, negative multiplied."""
    if rp == 1.0 or not recent:
        return raw
    return [
        (v / rp if v > 0 else v * rp) if t in recent else v for t, v in zip(ids, raw, strict=True)
    ]


def top_candidates(
    logits: np.ndarray,
    settings: SamplerSettings,
    recent: Container[int],
    top_n: int,
    piece: Callable[[int], bytes],
    idx: np.ndarray | None = None,
    log_z: float | None = None,
    allowed: np.ndarray | None = None,
    log_z_allowed: float | None = None,
    tail: np.ndarray | None = None,
) -> tuple[Candidate, ...]:
    """Rank candidates as the native chain does: (grammar,) penalties, top-k, top-p, min-p,
    temperature.

    Returns the top `top_n` candidates. Probabilities after the samplers are exact when the
    kept set lies within the ranked best (top-k bounds it); otherwise the tail outside them is
    counted with its raw logits. Plain Python floats (float64) over the ~100 ranked values:
    cheaper than a few dozen numpy calls on tiny arrays, each slow with the caches cold (this
    runs right after a decode, on every token).

    With a grammar, `allowed` says which of `idx` it allows (the caller ranks enough allowed
    tokens for top-k: engine/local/grammar.py); the samplers see those only, the list shows
    the best raw candidates, each cut by the grammar marked. `log_z_allowed` (the normalizer
    of the allowed tokens) and `tail` (the logits the grammar left, -inf elsewhere) stand in
    for the whole vocabulary's when top-k does not bound the kept set.
    """
    if idx is None or log_z is None:
        idx, log_z = rank(logits, ranked_size(settings, top_n, logits.shape[0]))
    m = idx.shape[0]
    ids0 = idx.tolist()
    raw0 = logits[idx].tolist()
    pen0 = penalized(raw0, ids0, recent, settings.repeat_penalty)
    order = sorted(range(m), key=pen0.__getitem__, reverse=True)  # stable for ties
    k = settings.top_k
    if allowed is None:
        bounded = 0 < k <= m
        if bounded:  # nothing below the k-th (or the top_n-th shown) changes what is reported
            order = order[: max(k, top_n)]
        live, shown = order, order[: min(top_n, m)]
        z_all = log_z
    else:
        ok = allowed.tolist()
        bounded = 0 < k
        live = [i for i in order if ok[i]]
        if bounded:
            live = live[: max(k, top_n)]
        shown = order[:top_n]
        if live and top_n and live[0] not in shown:  # the grammar's best stays in sight
            shown[-1] = live[0]
        z_all = log_z_allowed
    n = min(top_n, len(live))
    rest = (tail if tail is not None else logits, idx)
    kept = _survivors(live, raw0, pen0, settings, bounded, z_all, n, rest)
    out = []
    flags = (True, True, True)
    for i in shown:
        here = kept.get(i)
        if here is not None:
            flags = here[:3]
        out.append(
            Candidate(
                ids0[i],
                piece(ids0[i]),
                exp(raw0[i] - log_z),
                here[3] if here is not None else 0.0,
                *flags,
                kept_grammar=allowed is None or bool(ok[i]),
            )
        )
    return tuple(out)


def _survivors(
    live: list[int],
    raw0: list[float],
    pen0: list[float],
    settings: SamplerSettings,
    bounded: bool,
    log_z: float | None,
    n: int,
    rest: tuple[np.ndarray, np.ndarray],
) -> dict[int, tuple[bool, bool, bool, float]]:
    """For the first n of `live` (positions into the ranked arrays, best first: the tokens the
    samplers see): (kept by top-k, top-p, min-p; final probability). `rest`: the logits and
    the ranked ids, for the mass of unranked tokens the samplers keep when top-k is off."""
    if not live:
        return {}
    raw = [raw0[i] for i in live]
    pen = [pen0[i] for i in live]
    m = len(live)
    k = settings.top_k
    best = pen[0]

    # Probabilities among the top-k survivors (the whole vocabulary when top-k is off or wide).
    p_pen = [exp(v - best) for v in pen]
    if bounded:
        z_pen = fsum(p_pen[:k])
    elif log_z is None:  # (a grammar's allowed tokens beyond the ranked ones: unknown, none)
        z_pen = fsum(p_pen)
    else:
        z_pen = exp(log_z - best) - fsum(exp(v - best) for v in raw) + fsum(p_pen)
    q = [x / z_pen for x in p_pen]

    n_k = k if 0 < k < m else m  # how many survive top-k
    n_p = m  # top-p keeps up to the first token where the mass of the top-k survivors reaches p
    if settings.top_p < 1.0:
        mass = 0.0
        for i in range(n_k):
            mass += q[i]
            if mass >= settings.top_p:
                n_p = i + 1
                break
    n_min = m  # min-p keeps a prefix too: q descends
    if settings.min_p > 0:
        floor = settings.min_p * q[0]
        n_min = next((i for i, x in enumerate(q) if x < floor), m)
    n_kept = min(n_k, n_p, n_min)

    if settings.greedy:
        final = [1.0] + [0.0] * (n - 1)
    else:
        t = settings.temperature
        scaled = [exp((v - best) / t) for v in pen[:n_kept]]
        z_final = fsum(scaled)
        if n_kept == m and not bounded and log_z is not None:
            z_final += _kept_tail_mass(rest[0], rest[1], np.array(q), z_pen, best, settings)
        final = [x / z_final for x in scaled[:n]] + [0.0] * max(0, n - n_kept)
    return {live[i]: (i < n_k, i < n_p, i < n_min, final[i]) for i in range(n)}


def _kept_tail_mass(
    logits: np.ndarray,
    idx: np.ndarray,
    q: np.ndarray,
    z_pen: float,
    best: float,
    settings: SamplerSettings,
) -> float:
    """Temperature-scaled mass of the unranked tokens that top-p and min-p keep (top-k off).

    Rare and display-only (the native chain samples on this path); the tail is counted with
    its raw logits, so penalties on tokens outside the ranked set are not modelled.
    """
    outside = np.ones(logits.shape[0], dtype=bool)
    outside[idx] = False
    tail = logits[outside].astype(np.float64)
    if settings.min_p > 0:
        tail = tail[tail >= np.log(settings.min_p) + best]
    tail = np.sort(tail)[::-1]
    if settings.top_p < 1.0 and tail.size:
        # top-p keeps tokens until the mass reaches p, the one that reaches it included
        cum = q.sum() + np.cumsum(np.exp(tail - best) / z_pen)
        reached = int(np.searchsorted(cum, settings.top_p))
        tail = tail[: reached + 1]
    return float(np.exp((tail - best) / settings.temperature).sum())


def token_logprob(logits: np.ndarray, token: int, log_z: float) -> float:
    """Raw log-probability of one token."""
    return float(logits[token]) - log_z
