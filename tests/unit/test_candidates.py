"""The candidate ranking against a plain full-vocabulary reference of llama.cpp's chain."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from chatapp.engine.candidate_rows import settle
from chatapp.engine.local.loop.candidates import (
    rank,
    ranked_size,
    step_facts,
    token_logprob,
    top_candidates,
)
from chatapp.engine.local.loop.row_sampling import RecentTokens
from chatapp.sampling import SamplerSettings

N_VOCAB = 49152


def _logits(seed: int, spread: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, spread, N_VOCAB).astype(np.float32)
    logits[rng.integers(0, N_VOCAB, 5)] += 4 * spread  # a few clear favourites
    return logits


def _reference(logits: np.ndarray, s: SamplerSettings, recent: set[int]) -> list[tuple]:
    """llama.cpp's chain over the whole vocabulary in float64, written out step by step:
    (id, p, p_final, the step that cut it) per token, best first after the penalties."""
    raw = logits.astype(np.float64)
    p_raw = np.exp(raw - raw.max())
    p_raw /= p_raw.sum()
    pen = raw.copy()
    if s.repeat_penalty != 1.0:
        for t in recent:
            pen[t] = pen[t] / s.repeat_penalty if pen[t] > 0 else pen[t] * s.repeat_penalty
    order = np.argsort(-pen, kind="stable")
    v = pen[order]
    n = len(order)
    cut = [""] * n
    alive = n  # every step here keeps a prefix of what reaches it
    if s.greedy:
        cut[1:] = ["temperature"] * (n - 1)
        alive = 1
    else:
        if 0 < s.top_k < n:
            cut[s.top_k :] = ["top_k"] * (n - s.top_k)
            alive = s.top_k
        if s.top_p < 1.0:
            q = np.exp(v[:alive] - v[0])
            q /= q.sum()
            before = np.cumsum(q) - q
            keep = max(1, int((before < s.top_p).sum()))
            cut[keep:alive] = ["top_p"] * (alive - keep)
            alive = keep
        if s.min_p > 0.0:
            keep = max(1, int((v[:alive] >= v[0] + np.log(s.min_p)).sum()))
            cut[keep:alive] = ["min_p"] * (alive - keep)
            alive = keep
    final = np.zeros(n)
    t = s.temperature if not s.greedy else 1.0
    final[:alive] = np.exp((v[:alive] - v[0]) / t)
    final /= final.sum()
    return [(int(order[i]), p_raw[order[i]], final[i], cut[i]) for i in range(n)]


SETTINGS = [
    SamplerSettings(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1),
    SamplerSettings(temperature=1.5, top_k=10, top_p=0.5, min_p=0.0, repeat_penalty=1.0),
    SamplerSettings(temperature=0.7, top_k=0, top_p=0.9, min_p=0.1, repeat_penalty=1.3),
    SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0),
    SamplerSettings(temperature=0.9, top_k=5, top_p=1.0, min_p=0.0, repeat_penalty=1.0),
    SamplerSettings(temperature=0.7, top_k=0, top_p=0.5, min_p=0.0, repeat_penalty=1.0),
    SamplerSettings(temperature=1.0, top_k=65, top_p=1.0, min_p=0.0, repeat_penalty=1.3),
    SamplerSettings(temperature=1.0, top_k=100, top_p=0.97, min_p=0.0, repeat_penalty=1.5),
    SamplerSettings(temperature=0.0, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1),
]


@pytest.mark.parametrize("spread", [0.5, 2.0, 8.0])
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"t{s.temperature}k{s.top_k}")
def test_candidates_match_the_full_vocabulary_reference(settings, spread):
    for seed in range(3):
        logits = _logits(seed, spread)
        recent = {int(t) for t in np.argsort(logits)[-30:][::3]}  # some favourites repeat
        got = top_candidates(logits, settings, recent, 10, lambda i: b"", vocab=logits)
        want = _reference(logits, settings, recent)[:10]
        assert [c.id for c in got] == [w[0] for w in want]
        for c, (_, p, p_final, cut_by) in zip(got, want, strict=True):
            assert c.p == pytest.approx(p, rel=1e-4, abs=1e-9)
            assert c.p_final == pytest.approx(p_final, rel=1e-3, abs=1e-7)
            assert c.cut_by == cut_by


@pytest.mark.parametrize("m", [1, 10, 64, 300])
def test_rank_finds_the_m_largest_and_the_normaliser(m):
    for seed, spread in [(0, 0.5), (1, 3.0), (2, 10.0)]:
        logits = _logits(seed, spread)
        idx, log_z = rank(logits, m)
        assert len(set(idx.tolist())) == len(idx) >= m
        assert set(np.argsort(logits)[-m:].tolist()) <= set(idx.tolist())  # the m best in it
        assert len(idx) <= 2 * m + 8  # and not much more
        raw = logits.astype(np.float64)
        exact = raw.max() + np.log(np.exp(raw - raw.max()).sum())
        assert log_z == pytest.approx(exact, abs=1e-4)
        tok = int(idx[0])
        assert token_logprob(logits, tok, log_z) == pytest.approx(raw[tok] - exact, abs=1e-4)


@pytest.mark.parametrize("n", [N_VOCAB + 17, 32000, 151936])
@pytest.mark.parametrize("shift", [0.0, 90.0, -80.0])
def test_rank_with_a_ragged_tail_and_far_from_zero(n, shift):
    """Vocabularies that are not a multiple of the group size (the best token in the tail),
    and logits far from 0 (the normaliser then subtracts the maximum first)."""
    rng = np.random.default_rng(n)
    logits = (rng.normal(0.0, 3.0, n) + shift).astype(np.float32)
    logits[-3] = logits.max() + 5.0
    idx, log_z = rank(logits, 40)
    assert n - 3 in idx.tolist()
    assert set(np.argsort(logits)[-40:].tolist()) <= set(idx.tolist())
    raw = logits.astype(np.float64)
    assert log_z == pytest.approx(raw.max() + np.log(np.exp(raw - raw.max()).sum()), abs=1e-4)


def test_rank_of_a_flat_row_and_of_ties():
    flat = np.zeros(N_VOCAB, np.float32)
    idx, log_z = rank(flat, 64)
    assert len(set(idx.tolist())) == len(idx) == 64  # cut: a whole row of ties
    assert log_z == pytest.approx(np.log(N_VOCAB), abs=1e-4)
    small = np.arange(100, dtype=np.float32)  # fewer blocks than m: the plain path
    idx, _ = rank(small, 64)
    assert sorted(idx.tolist()) == list(range(36, 100))


class _Window(set):
    """A penalty window as step_facts reads it (row_sampling.RecentTokens: counts, membership)."""

    @property
    def counts(self) -> dict[int, int]:
        return dict.fromkeys(self, 1)


@pytest.mark.parametrize("spread", [0.5, 2.0, 8.0])
@pytest.mark.parametrize(
    "settings", [s for s in SETTINGS if s.greedy or s.top_k > 0], ids=lambda s: f"k{s.top_k}"
)
def test_rows_made_later_from_a_steps_facts_equal_the_rows_made_at_once(settings, spread):
    """The token loop keeps raw facts (step_facts) and the rows are made when shown: the same
    rows as top_candidates, pieces included, after the trip through the pipe (pickle)."""
    for seed in range(3):
        logits = _logits(seed, spread)
        recent = _Window(int(t) for t in np.argsort(logits)[-30:][::3])
        m = ranked_size(settings, 10, N_VOCAB)
        idx, log_z = rank(logits, m)
        piece = lambda t: str(t).encode()  # noqa: E731
        facts = step_facts(logits, idx, log_z, settings, recent, 10, piece)
        assert facts._rows is None and len(facts) == 10 and facts  # no rows made for these
        facts.settle()  # (the token loop, as it sends the step)
        sent = pickle.loads(pickle.dumps(facts))
        assert sent._rows is None
        want = top_candidates(logits, settings, recent, 10, piece, idx=idx, log_z=log_z)
        assert sent == want and tuple(sent) == want
        assert [c.text for c in sent] == [str(c.id) for c in want]


def test_a_steps_facts_compare_without_making_rows():
    logits = _logits(0, 2.0)
    s = SETTINGS[0]
    idx, log_z = rank(logits, ranked_size(s, 10, N_VOCAB))
    a = step_facts(logits, idx, log_z, s, _Window(), 10, lambda t: b"x")
    b = step_facts(logits, idx, log_z, s, _Window(), 10, lambda t: b"x")
    assert a == a and a != b  # a reactive's check: identity of the facts, nothing derived
    assert a._rows is None and b._rows is None
    assert a[0].id == int(idx[np.argmax(logits[idx])]) and a._rows is not None


def test_a_steps_capture_is_not_changed_by_the_next_decode_or_token():
    """step_facts puts its facts in order only when the step is sent (StepCapture.settle): by
    then the next decode has overwritten the logits row and the penalty window has moved on,
    so the rows must be those of the step's own moment."""
    settings = next(s for s in SETTINGS if s.top_k > 0 and s.repeat_penalty != 1.0)
    logits = _logits(1, 2.0)
    recent = RecentTokens([int(t) for t in np.argsort(logits)[-12:][::2]], 6)
    idx, log_z = rank(logits, ranked_size(settings, 10, N_VOCAB))
    piece = lambda t: str(t).encode()  # noqa: E731
    want = top_candidates(logits, settings, recent, 10, piece, idx=idx, log_z=log_z)
    late = step_facts(logits, idx, log_z, settings, recent, 10, piece)
    logits[:] = np.roll(logits, 7)  # the next decode writes the same buffer
    for t in np.argsort(logits)[-6:]:  # and the sampled tokens move the window on
        recent.push(int(t))
    late.settle()
    assert pickle.loads(pickle.dumps(late)) == want


def test_a_capture_is_settled_by_an_explicit_call_not_by_pickling():
    """Pickling a step whose facts are still a capture is refused (settling is the token
    loop's explicit call as it sends a batch, never a side effect of the pipe)."""
    s = SETTINGS[0]
    logits = _logits(2, 2.0)
    idx, log_z = rank(logits, ranked_size(s, 10, N_VOCAB))
    late = step_facts(logits, idx, log_z, s, _Window(), 10, lambda t: b"x")
    with pytest.raises(TypeError, match="settle"):
        pickle.dumps(late)
    settle([late, ()])
    assert pickle.loads(pickle.dumps(late)) == late.rows()
