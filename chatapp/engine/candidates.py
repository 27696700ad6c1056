"""Top candidates of the next token, before and after the sampler chain (numpy, no llama.cpp)."""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

from chatapp.engine.protocol import Candidate
from chatapp.sampling import SamplerSettings

# How many candidates are ranked per step (more than are shown, so cuts are exact in practice).
RANKED = 64


def top_candidates(
    logits: np.ndarray,
    settings: SamplerSettings,
    recent: Collection[int],
    top_n: int,
    piece: Callable[[int], bytes],
) -> tuple[tuple[Candidate, ...], dict[int, float]]:
    """Rank candidates as the native chain does: penalties, top-k, top-p, min-p, temperature.

    Returns the top `top_n` candidates and {token id: raw log-probability} of the ranked set.
    Probabilities after the samplers are exact when the kept set lies within the RANKED best;
    otherwise the tail outside them is counted with its raw logits.
    """
    n_vocab = logits.shape[0]
    m = min(max(top_n, RANKED, settings.top_k), n_vocab)
    idx = np.argpartition(logits, n_vocab - m)[n_vocab - m :]
    raw = logits[idx].astype(np.float64)
    top = float(raw.max())
    ex_all = np.exp(logits - np.float32(top))
    z_raw = float(ex_all.sum(dtype=np.float64))
    log_z = top + np.log(z_raw)
    logp_raw = raw - log_z

    # Repetition penalty as llama.cpp applies it: divide positive logits, multiply negative ones.
    pen = raw.copy()
    rp = settings.repeat_penalty
    if rp != 1.0 and recent:
        mask = np.fromiter((int(t) in recent for t in idx), dtype=bool, count=m)
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
    out = tuple(
        Candidate(
            id=int(idx[i]),
            piece=piece(int(idx[i])),
            p=float(np.exp(logp_raw[i])),
            p_final=float(final[i]),
            kept_top_k=bool(kept_k[i]),
            kept_top_p=bool(kept_p[i]),
            kept_min_p=bool(kept_min[i]),
        )
        for i in range(n)
    )
    logprobs = {int(i): float(lp) for i, lp in zip(idx, logp_raw, strict=True)}
    return out, logprobs


def token_logprob(logits: np.ndarray, token: int, ranked: dict[int, float]) -> float:
    """Raw log-probability of one token (from the ranked set when it is there)."""
    if token in ranked:
        return ranked[token]
    top = float(logits.max())
    log_z = top + float(np.log(np.exp(logits - np.float32(top)).sum(dtype=np.float64)))
    return float(logits[token]) - log_z
