"""Top candidates of the next token, before and after the sampler chain (numpy, no llama.cpp)."""

from __future__ import annotations

from collections.abc import Callable, Container

import numpy as np

from chatapp.engine.protocol import Candidate
from chatapp.sampling import SamplerSettings

# How many candidates are ranked per step (more than are shown, so cuts are exact in practice).
RANKED = 64


_SCRATCH: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _scratch(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Reused n_vocab-sized buffers: fresh 200 KB temporaries cost page faults on every token.
    Only the worker's token loop (one thread) calls this."""
    bufs = _SCRATCH.get(n)
    if bufs is None:
        bufs = _SCRATCH[n] = (np.empty(n, dtype=np.float32), np.empty(n, dtype=bool))
    return bufs


def log_normalizer(logits: np.ndarray, top: float) -> float:
    """log(sum(exp(logits))) computed around the maximum, without temporaries."""
    buf, _ = _scratch(logits.shape[0])
    np.subtract(logits, np.float32(top), out=buf)
    np.exp(buf, out=buf)
    return top + float(np.log(buf.sum(dtype=np.float64)))


def ranked_size(settings: SamplerSettings, top_n: int, n_vocab: int) -> int:
    """How many of the best tokens to rank so every cut the settings make is exact."""
    return min(max(top_n, RANKED, settings.top_k), n_vocab)


# Tokens further than this below the best one are left out of the normaliser: together they
# weigh less than n_vocab * e^-GAP of the best token (< 3e-7 relative for a 50k vocabulary).
GAP = 26.0


def rank(logits: np.ndarray, m: int) -> tuple[np.ndarray, float]:
    """Ids of the m largest logits (unordered) and log(sum(exp(logits))), in few passes.

    One comparison selects the tokens within GAP of the best; the normaliser and the top m
    come from that selection only (a full argpartition of a 49k vocabulary costs ~0.4 ms).
    """
    n = logits.shape[0]
    top = float(logits.max())
    _, mask = _scratch(n)
    np.greater(logits, np.float32(top - GAP), out=mask)
    sel = np.flatnonzero(mask)
    vals = logits[sel]
    log_z = top + float(np.log(np.exp(vals - np.float32(top)).sum(dtype=np.float64)))
    if sel.shape[0] < m:  # a very peaked distribution: rank the whole vocabulary
        sel = np.argpartition(logits, n - m)[n - m :] if m < n else np.arange(n)
    elif sel.shape[0] > m:
        sel = sel[np.argpartition(vals, sel.shape[0] - m)[sel.shape[0] - m :]]
    return sel, log_z


def top_candidates(
    logits: np.ndarray,
    settings: SamplerSettings,
    recent: Container[int],
    top_n: int,
    piece: Callable[[int], bytes],
    idx: np.ndarray | None = None,
    log_z: float | None = None,
) -> tuple[tuple[Candidate, ...], dict[int, float]]:
    """Rank candidates as the native chain does: penalties, top-k, top-p, min-p, temperature.

    Returns the top `top_n` candidates and {token id: raw log-probability} of the ranked set.
    Probabilities after the samplers are exact when the kept set lies within the RANKED best;
    otherwise the tail outside them is counted with its raw logits.
    """
    if idx is None or log_z is None:
        idx, log_z = rank(logits, ranked_size(settings, top_n, logits.shape[0]))
    m = idx.shape[0]
    raw = logits[idx].astype(np.float64)
    top = float(raw.max())
    z_raw = float(np.exp(log_z - top))
    logp_raw = raw - log_z

    # Repetition penalty as llama.cpp applies it: divide positive logits, multiply negative ones.
    pen = raw.copy()
    rp = settings.repeat_penalty
    if rp != 1.0 and recent:
        mask = np.fromiter((t in recent for t in idx.tolist()), dtype=bool, count=m)
        pen[mask] = np.where(pen[mask] > 0, pen[mask] / rp, pen[mask] * rp)
    order = np.argsort(-pen, kind="stable")
    idx, raw, pen, logp_raw = idx[order], raw[order], pen[order], logp_raw[order]

    kept_k = np.ones(m, dtype=bool)
    k = settings.top_k
    if 0 < k < m:
        kept_k[k:] = False
    # Probabilities among the top-k survivors (the whole vocabulary when top-k is off or wide).
    p_pen = np.exp(pen - pen[0])
    if 0 < k <= m:
        z_pen = p_pen[:k].sum()
    else:
        z_pen = z_raw * np.exp(top - pen[0]) - np.exp(raw - pen[0]).sum() + p_pen.sum()
    q = p_pen / z_pen

    kept_p = np.ones(m, dtype=bool)
    if settings.top_p < 1.0:
        cum = np.cumsum(np.where(kept_k, q, 0.0))
        reached = np.nonzero(cum >= settings.top_p)[0]
        if reached.size:
            kept_p[reached[0] + 1 :] = False
    kept_min = q >= settings.min_p * q[0] if settings.min_p > 0 else np.ones(m, dtype=bool)
    kept = kept_k & kept_p & kept_min

    if settings.greedy:
        final = np.zeros(m)
        final[0] = 1.0
    else:
        t = settings.temperature
        scaled = np.where(kept, np.exp((pen - pen[0]) / t), 0.0)
        z_final = scaled.sum()
        if kept[-1] and not (0 < k <= m):
            # The kept set runs past the ranked candidates: add the raw tail above the cut.
            floor = np.log(settings.min_p) + pen[0] if settings.min_p > 0 else -np.inf
            tail = logits[logits < np.float32(raw.min())]
            tail = tail[tail >= floor] if np.isfinite(floor) else tail
            z_final += float(np.exp((tail.astype(np.float64) - pen[0]) / t).sum())
        final = scaled / z_final

    n = min(top_n, m)
    ids = idx[:n].tolist()
    p_raw = np.exp(logp_raw[:n]).tolist()
    p_fin = final[:n].tolist()
    fk, fp, fm = kept_k[:n].tolist(), kept_p[:n].tolist(), kept_min[:n].tolist()
    out = tuple(
        Candidate(ids[i], piece(ids[i]), p_raw[i], p_fin[i], fk[i], fp[i], fm[i]) for i in range(n)
    )
    return out, dict(zip(idx.tolist(), logp_raw.tolist(), strict=True))


def token_logprob(logits: np.ndarray, token: int, ranked: dict[int, float]) -> float:
    """Raw log-probability of one token (from the ranked set when it is there)."""
    if token in ranked:
        return ranked[token]
    return float(logits[token]) - log_normalizer(logits, float(logits.max()))
