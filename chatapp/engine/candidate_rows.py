"""Candidate rows of one step, derived from the raw facts the token loop keeps, when shown;
what the sampler chain keeps of them, by the kept rules of chatapp.sampling's table."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, overload

import numpy as np

from chatapp.sampling import CUTS, Kept, SamplerSettings, repeat_penalized

GRAMMAR = "grammar"  # Candidate.cut_by of a token the grammar does not allow


@dataclass(frozen=True)
class Candidate:
    """One candidate for the next token."""

    id: int
    piece: bytes
    p: float  # probability before the samplers (softmax of the logits); nan: not reported
    p_final: float  # probability after the samplers (the penalties, the filters, temperature)
    cut_by: str = ""
    """The step that cut it: "grammar" or a sampler's SamplerSettings field name (a row of
    chatapp.sampling's table); "" when it came through every step."""

    @property
    def kept(self) -> bool:
        return not self.cut_by

    @property
    def kept_grammar(self) -> bool:
        """False: the request's grammar does not allow this token here."""
        return self.cut_by != GRAMMAR

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


class Candidates(Seq[Candidate]):
    """The candidate rows of one step, derived from its StepFacts on first use (the latest
    token when the panel paints, a past one when it is selected, `ask --json` at the end) and
    kept. Its length and truth need no rows; it pickles as its facts, once settled (`settle`:
    a capture, FactsLater, is put in order by an explicit call, never by pickling)."""

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

    def settle(self) -> None:
        """Put a capture's facts in order now (the token loop: on each batch of steps it
        sends, where it runs with the caches warm)."""
        self._facts = self.facts

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
        if not isinstance(self._facts, StepFacts):
            raise TypeError("a step's candidates are sent settled: call settle() first")
        return (Candidates, (self._facts,))

    def __repr__(self) -> str:
        return f"Candidates({self.rows()!r})"


def settle(steps: Iterable[Seq[Candidate]]) -> None:
    """Put the captured facts of these steps' candidates in order (before they are sent)."""
    for candidates in steps:
        if isinstance(candidates, Candidates):
            candidates.settle()


def rows_from_facts(facts: StepFacts) -> tuple[Candidate, ...]:
    """The rows of one step (top-k or greedy bounds what the samplers keep: the token loop
    keeps facts only then)."""
    return candidate_rows(
        np.frombuffer(facts.ids, dtype=np.int32),
        np.frombuffer(facts.logits, dtype=np.float32),
        facts.log_z,
        facts.settings,
        facts.penalized,
        facts.top_n,
        facts.pieces.__getitem__,
    )


def penalized(raw: np.ndarray, hit: np.ndarray | None, rp: float) -> np.ndarray:
    """Logits after llama.cpp's repetition penalty (float64): those where `hit` (the recent
    tokens) divided by rp when positive, multiplied when not."""
    pen = raw.astype(np.float64)
    if rp != 1.0 and hit is not None and hit.any():
        pen[hit] = repeat_penalized(pen[hit], rp)
    return pen


def _recent(ids: np.ndarray, recent: Container[int]) -> np.ndarray | None:
    """Which of a few ranked tokens are in the penalty window."""
    if not recent:
        return None
    return np.fromiter((t in recent for t in ids.tolist()), dtype=bool, count=ids.shape[0])


class Column:
    """The candidates that reach one step of the chain, best first: what a kept rule reads
    (chatapp.sampling.Kept). Their probabilities count `rest`, the mass exp(logit - best) of
    candidates ranked below them that are not listed (the whole vocabulary's tail)."""

    def __init__(self, logit: np.ndarray, rest: float = 0.0) -> None:
        self.logit = logit  # after the penalties, descending
        self.rest = rest
        self._p: np.ndarray | None = None

    @property
    def rank(self) -> np.ndarray:
        n = self.logit.shape[0]
        return _RANKS[:n] if n <= _RANKS.shape[0] else np.arange(n)

    @property
    def p(self) -> np.ndarray:
        if self._p is None:
            e = np.exp(self.logit - self.logit[0])
            self._p = e / (e.sum() + self.rest)
        return self._p

    @property
    def log_p(self) -> np.ndarray:
        return np.log(self.p)

    @property
    def mass_before(self) -> np.ndarray:
        p = self.p
        return np.cumsum(p) - p


_RANKS = np.arange(4096)


def chain_cuts(
    pen: np.ndarray, s: SamplerSettings, rest: float = 0.0
) -> tuple[np.ndarray, np.ndarray, int]:
    """What llama.cpp's chain does with candidates whose logits after the penalties are `pen`
    (float64, best first), and `rest` (see Column) below them: per candidate, which step cut
    it (0: none, j: sampling.CUTS[j - 1]), its probability after the samplers, and the step
    that cut the rest (0 when there is none; -1: some of it comes through, list more).

    Each step the settings put in the chain applies its kept rule to what the steps before
    it kept; the last draws from softmax(logit / temperature) over what is left. The rest is
    cut by the first step that cuts the last listed candidate (the rules keep a best part)."""
    n = pen.shape[0]
    cut = np.zeros(n, dtype=np.int8)
    alive = np.arange(n)
    rest_cut = -1 if rest > 0.0 else 0
    for j, kept, value in _active(s):
        if alive.shape[0]:
            keep = np.asarray(kept(Column(pen[alive], rest if rest_cut < 0 else 0.0), value))
            if rest_cut < 0 and alive[-1] == n - 1 and not keep[-1]:
                rest_cut = j
            cut[alive[~keep]] = j
            alive = alive[keep]
    final = np.zeros(n)
    if alive.shape[0]:
        t = s.temperature if s.temperature > 0.0 else 1.0  # (greedy: one is left)
        scaled = np.exp((pen[alive] - pen[alive[0]]) / t)
        final[alive] = scaled / scaled.sum()
    return cut, final, rest_cut


@lru_cache(maxsize=64)
def _active(s: SamplerSettings) -> tuple[tuple[int, Kept, float], ...]:
    """The steps these settings put in the chain that can cut: (number, kept rule, value)."""
    return tuple(
        (j, row.kept, getattr(s, row.name))
        for j, row in enumerate(CUTS, 1)
        if row.kept is not None and row.steps(s)
    )


CUT_NAMES = ("", *(row.name for row in CUTS))
"""Candidate.cut_by for each of chain_cuts' numbers."""


def candidate_rows(
    ids0: np.ndarray,
    raw0: np.ndarray,
    log_z: float,
    settings: SamplerSettings,
    recent: Container[int],
    top_n: int,
    piece_at: Callable[[int], bytes],
    allowed: np.ndarray | None = None,
    vocab_cuts: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
) -> tuple[Candidate, ...]:
    """The top `top_n` candidates of a step, ranked as the native chain ranks them (after the
    penalties), each with its raw probability, the steps that cut it and its probability
    after the samplers; `ids0` are ranked tokens with raw logits `raw0`, `piece_at(i)` the
    piece of ids0[i].

    With a grammar, `allowed` says which of `ids0` it allows; the samplers see those only, the
    list shows the best raw candidates, each the grammar cut marked, and the grammar's best.
    Where top-k (or greedy) bounds what the chain keeps, the ranked tokens suffice; otherwise
    `vocab_cuts(ids0)` gives what _ranked_cuts gives, from chain_cuts over the whole
    vocabulary (engine/local/loop/candidates.py).
    """
    rp = settings.repeat_penalty
    pen0 = penalized(raw0, _recent(ids0, recent) if rp != 1.0 else None, rp)
    order = np.argsort(-pen0, kind="stable")
    live = order if allowed is None else order[allowed[order]]
    shown = order[:top_n].tolist()
    if allowed is not None and live.shape[0] and shown and int(live[0]) not in shown:
        shown[-1] = int(live[0])  # the grammar's best stays in sight
    k = 1 if settings.greedy else settings.top_k
    if vocab_cuts is None or 0 < k <= live.shape[0]:
        cut_of, final_of = _ranked_cuts(pen0, live, settings)
    else:
        cut_of, final_of = vocab_cuts(ids0)
    at = np.array(shown, dtype=np.int64)
    p = np.exp(raw0[at].astype(np.float64) - log_z).tolist()
    rows = zip(shown, ids0[at].tolist(), p, final_of[at].tolist(), cut_of[at].tolist(), strict=True)
    return tuple(Candidate(t, piece_at(i), q, f, CODES[c]) for i, t, q, f, c in rows)


CODES = (*CUT_NAMES, GRAMMAR)
"""Candidate.cut_by by code: chain_cuts' numbers, and -1 for the grammar."""


def _ranked_cuts(pen0: np.ndarray, live: np.ndarray, settings: SamplerSettings):
    """chain_cuts over the ranked tokens the chain sees (`live`, best first): per ranked
    token, its cut's code (CODES) and its probability after the samplers."""
    cut, final, _ = chain_cuts(pen0[live], settings)
    cut_of = np.full(pen0.shape[0], -1, dtype=np.int8)
    cut_of[live] = cut
    final_of = np.zeros(pen0.shape[0])
    final_of[live] = final
    return cut_of, final_of
