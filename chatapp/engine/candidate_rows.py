"""Candidate rows of one step, derived from the raw facts the token loop keeps, when shown."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass
from math import exp, fsum
from typing import Protocol, overload

from chatapp.sampling import SamplerSettings


@dataclass(frozen=True)
class Candidate:
    """One candidate for the next token."""

    id: int
    piece: bytes
    p: float  # probability before the samplers (softmax of the logits)
    p_final: float  # probability after penalties, top-k, top-p, min-p and temperature
    kept_top_k: bool = True
    kept_top_p: bool = True
    kept_min_p: bool = True
    kept_grammar: bool = True  # False: the request's grammar does not allow this token here

    @property
    def kept(self) -> bool:
        return self.kept_top_k and self.kept_top_p and self.kept_min_p and self.kept_grammar

    @property
    def text(self) -> str:
        return self.piece.decode("utf-8", errors="replace")


@dataclass(frozen=True, eq=False)
class StepFacts:
    """What the token loop keeps of one step for the views: the ranked tokens (at least the
    best the samplers can keep), best raw logit first, with their raw logits (int32 and
    float32 bytes), the log-normalizer of the whole row, the settings the step was sampled
    with, which ranked tokens the repetition penalty lowers, and the pieces of the first
    ranked tokens: enough for the `top_n` rows, which lie within the first top_n + penalized
    by raw logit (the penalty only lowers)."""

    ids: bytes
    logits: bytes
    log_z: float
    settings: SamplerSettings
    top_n: int
    penalized: frozenset[int]
    pieces: tuple[bytes, ...]

    @property
    def count(self) -> int:
        return len(self.ids) // 4


class FactsLater(Protocol):
    """A step's facts still to be put in order (the token loop's capture: sorting the ranked
    tokens and looking up their pieces waits until the step is sent, where a batch of steps
    runs with the caches warm, instead of right after a decode, where each call runs cold)."""

    count: int
    top_n: int

    def settle(self) -> StepFacts: ...


class Candidates(Sequence[Candidate]):
    """The candidate rows of one step, derived from its StepFacts on first use (the latest
    token when the panel paints, a past one when it is selected, `ask --json` at the end) and
    kept. Its length and truth need no rows; it pickles as its facts (settling FactsLater)."""

    __slots__ = ("_facts", "_rows")

    def __init__(self, facts: StepFacts | FactsLater) -> None:
        self._facts = facts
        self._rows: tuple[Candidate, ...] | None = None

    @property
    def facts(self) -> StepFacts:
        f = self._facts
        if not isinstance(f, StepFacts):
            f = self._facts = f.settle()
        return f

    def rows(self) -> tuple[Candidate, ...]:
        if self._rows is None:
            self._rows = rows_from_facts(self.facts)
        return self._rows

    def __len__(self) -> int:
        return min(self._facts.top_n, self._facts.count)

    def __bool__(self) -> bool:
        return len(self) > 0

    @overload
    def __getitem__(self, i: int) -> Candidate: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[Candidate, ...]: ...
    def __getitem__(self, i):
        return self.rows()[i]

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Candidates):  # (a reactive's comparison: no rows made for it)
            return self.facts is other.facts
        if isinstance(other, tuple):
            return self.rows() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (Candidates, (self.facts,))

    def __repr__(self) -> str:
        return f"Candidates({self.rows()!r})"


def rows_from_facts(facts: StepFacts) -> tuple[Candidate, ...]:
    """The rows of one step (top-k or greedy bounds what the samplers keep: the token loop
    keeps facts only then)."""
    ids = array("i")
    ids.frombytes(facts.ids)
    raw = array("f")
    raw.frombytes(facts.logits)
    pieces = facts.pieces
    return candidate_rows(
        ids.tolist(),
        raw.tolist(),
        facts.log_z,
        facts.settings,
        facts.penalized,
        facts.top_n,
        pieces.__getitem__,
    )


def penalized(raw: list[float], ids: list[int], recent: Container[int], rp: float) -> list[float]:
    """Logits after llama.cpp's repetition penalty: positive ones divided, negative multiplied."""
    if rp == 1.0 or not recent:
        return raw
    return [
        (v / rp if v > 0 else v * rp) if t in recent else v for t, v in zip(ids, raw, strict=True)
    ]


TailMass = Callable[[list[float], float, float], float]
"""(probabilities of the ranked tokens after top-k, their normalizer, the best logit) -> the
temperature-scaled mass of the unranked tokens top-p and min-p keep (top-k off)."""


def candidate_rows(
    ids0: list[int],
    raw0: list[float],
    log_z: float,
    settings: SamplerSettings,
    recent: Container[int],
    top_n: int,
    piece_at: Callable[[int], bytes],
    allowed: list[bool] | None = None,
    log_z_allowed: float | None = None,
    tail_mass: TailMass | None = None,
) -> tuple[Candidate, ...]:
    """Rank candidates as the native chain does: (grammar,) penalties, top-k, top-p, min-p,
    temperature, over the ranked tokens `ids0` with raw logits `raw0`; `piece_at(i)` is the
    piece of ids0[i].

    Returns the top `top_n` candidates. Probabilities after the samplers are exact when the
    kept set lies within the ranked best (top-k bounds it); otherwise `tail_mass` counts the
    rest. Plain Python floats (float64) over the ~100 ranked values.

    With a grammar, `allowed` says which of `ids0` it allows; the samplers see those only, the
    list shows the best raw candidates, each cut by the grammar marked. `log_z_allowed` (the
    normalizer of the allowed tokens) stands in for the whole vocabulary's.
    """
    m = len(ids0)
    pen0 = penalized(raw0, ids0, recent, settings.repeat_penalty)
    order = sorted(range(m), key=pen0.__getitem__, reverse=True)  # stable for ties
    k = settings.top_k
    if allowed is None:
        bounded = 0 < k <= m
        if bounded:  # nothing below the k-th (or the top_n-th shown) changes what is reported
            order = order[: max(k, top_n)]
        live, shown = order, order[: min(top_n, m)]
        z_all: float | None = log_z
    else:
        bounded = 0 < k
        live = [i for i in order if allowed[i]]
        if bounded:
            live = live[: max(k, top_n)]
        shown = order[:top_n]
        if live and top_n and live[0] not in shown:  # the grammar's best stays in sight
            shown[-1] = live[0]
        z_all = log_z_allowed
    n = min(top_n, len(live))
    kept = _survivors(live, raw0, pen0, settings, bounded, z_all, n, tail_mass)
    out = []
    flags = (True, True, True)
    for i in shown:
        here = kept.get(i)
        if here is not None:
            flags = here[:3]
        out.append(
            Candidate(
                ids0[i],
                piece_at(i),
                exp(raw0[i] - log_z),
                here[3] if here is not None else 0.0,
                *flags,
                kept_grammar=allowed is None or bool(allowed[i]),
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
    tail_mass: TailMass | None,
) -> dict[int, tuple[bool, bool, bool, float]]:
    """For the first n of `live` (positions into the ranked lists, best first: the tokens the
    samplers see): (kept by top-k, top-p, min-p; final probability)."""
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
        if n_kept == m and not bounded and log_z is not None and tail_mass is not None:
            z_final += tail_mass(q, z_pen, best)
        final = [x / z_final for x in scaled[:n]] + [0.0] * max(0, n - n_kept)
    return {live[i]: (i < n_k, i < n_p, i < n_min, final[i]) for i in range(n)}
