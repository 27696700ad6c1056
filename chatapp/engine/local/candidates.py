"""Top candidates of the next token, before and after the sampler chain (numpy, no llama.cpp)."""

from __future__ import annotations

from collections.abc import Callable, Container

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


def log_normalizer(logits: np.ndarray, top: float) -> float:
    """log(sum(exp(logits))) computed around the maximum, without temporaries."""
    buf = _scratch(logits.shape[0])
    np.subtract(logits, np.float32(top), out=buf)
    np.exp(buf, out=buf)
    return top + float(np.log(buf.sum()))  # float32 pairwise sum of values <= 1: exact enough


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
    """Ids of the m largest logits (unordered) and log(sum(exp(logits))) (nan when not
    `normalize`), in a few passes.

    The threshold is the m-th largest of the maxima of n/BLOCK groups: at least m logits
    reach it, and usually only a few more, so the final partition is over ~m values
    instead of the whole vocabulary (a full argpartition of 49k logits costs ~0.4 ms).
    """
    n = logits.shape[0]
    blocks = n // BLOCK
    if m >= n or blocks < m:
        log_z = log_normalizer(logits, float(logits.max())) if normalize else float("nan")
        sel = np.argpartition(logits, n - m)[n - m :] if m < n else np.arange(n)
        return sel, log_z
    # Groups of BLOCK logits, strided (column maxima of a row-major reshape are the fast ones).
    maxima = logits[: blocks * BLOCK].reshape(BLOCK, blocks).max(axis=0)
    top = max(float(maxima.max()), float(logits[blocks * BLOCK :].max(initial=-np.inf)))
    log_z = log_normalizer(logits, top) if normalize else float("nan")
    threshold = np.partition(maxima, blocks - m)[blocks - m]
    sel = np.flatnonzero(logits >= threshold)
    if sel.shape[0] > m:
        vals = logits[sel]
        sel = sel[np.argpartition(vals, sel.shape[0] - m)[sel.shape[0] - m :]]
    return sel, log_z


def penalized(raw: np.ndarray, ids: list[int], recent: Container[int], rp: float) -> np.ndarray:
    """Logits after llama.cpp's repetition penalty: positive ones divided, negative multiplied."""
    if rp == 1.0 or not recent:
        return raw
    hit = [i for i, t in enumerate(ids) if t in recent]
    if not hit:
        return raw
    out = raw.copy()
    v = out[hit]
    out[hit] = np.where(v > 0, v / rp, v * rp)
    return out


def top_candidates(
    logits: np.ndarray,
    settings: SamplerSettings,
    recent: Container[int],
    top_n: int,
    piece: Callable[[int], bytes],
    idx: np.ndarray | None = None,
    log_z: float | None = None,
) -> tuple[Candidate, ...]:
    """Rank candidates as the native chain does: penalties, top-k, top-p, min-p, temperature.

    Returns the top `top_n` candidates. Probabilities after the samplers are exact when the
    kept set lies within the ranked best (top-k bounds it); otherwise the tail outside them is
    counted with its raw logits.
    """
    if idx is None or log_z is None:
        idx, log_z = rank(logits, ranked_size(settings, top_n, logits.shape[0]))
    m = idx.shape[0]
    raw = logits[idx].astype(np.float64)
    pen = penalized(raw, idx.tolist(), recent, settings.repeat_penalty)
    order = np.argsort(-pen, kind="stable")
    idx, raw, pen = idx[order], raw[order], pen[order]
    best = pen[0]

    k = settings.top_k
    bounded = 0 < k <= m
    # Probabilities among the top-k survivors (the whole vocabulary when top-k is off or wide).
    p_pen = np.exp(pen - best)
    if bounded:
        z_pen = p_pen[:k].sum()
    else:
        z_pen = np.exp(log_z - best) - np.exp(raw - best).sum() + p_pen.sum()
    q = p_pen / z_pen

    n_k = k if 0 < k < m else m  # how many survive top-k
    n_p = m  # top-p keeps up to the first token where the mass of the top-k survivors reaches p
    if settings.top_p < 1.0:
        reached = int(np.searchsorted(np.cumsum(q[:n_k]), settings.top_p))
        if reached < n_k:
            n_p = reached + 1
    kept_min = q >= settings.min_p * q[0] if settings.min_p > 0 else None
    n_kept = min(n_k, n_p, int(kept_min.sum()) if kept_min is not None else m)  # q descends

    if settings.greedy:
        final = np.zeros(m)
        final[0] = 1.0
    else:
        t = settings.temperature
        scaled = np.exp((pen[:n_kept] - best) / t)
        z_final = scaled.sum()
        if n_kept == m and not bounded:
            z_final += _kept_tail_mass(logits, idx, q, z_pen, best, settings)
        final = np.zeros(m)
        final[:n_kept] = scaled / z_final

    n = min(top_n, m)
    ids = idx[:n].tolist()
    p_raw = np.exp(raw[:n] - log_z).tolist()
    p_fin = final[:n].tolist()
    mins = kept_min[:n].tolist() if kept_min is not None else [True] * n
    return tuple(
        Candidate(ids[i], piece(ids[i]), p_raw[i], p_fin[i], i < n_k, i < n_p, mins[i])
        for i in range(n)
    )


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
