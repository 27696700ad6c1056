"""The measures a comparison takes of one file: its reply, agreement, KL, perplexity, memory."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from chatapp.engine.protocol import EngineError, Event, Failed, Finished, GenerateRequest, Token
from chatapp.models import perplexity
from chatapp.models.compare_result import RunResult


class Replier(Protocol):
    """An engine that replies (any Engine)."""

    def generate(self, request: GenerateRequest) -> Iterator[Event]: ...


@dataclass
class Scored:
    """A text's token ids and each next token's log-probabilities."""

    ids: list[int]
    logprobs: np.ndarray  # (len(ids) - 1, n_vocab) float32


def quality(ref: np.ndarray, other: np.ndarray, ids: Sequence[int]) -> tuple[float, float, float]:
    """(top-1 agreement, mean KL(ref || other), perplexity of `other`) from log-prob rows."""
    if ref.shape != other.shape:
        raise ValueError(f"log-prob shapes differ: {ref.shape} vs {other.shape}")
    n = ref.shape[0]
    if n == 0:
        return 1.0, 0.0, float("nan")
    agree = float(np.mean(ref.argmax(axis=1) == other.argmax(axis=1)))
    kl = 0.0
    for i in range(0, n, 64):  # in slices: a float64 copy of all rows would be large
        r = ref[i : i + 64].astype(np.float64)
        o = other[i : i + 64].astype(np.float64)
        kl += float(np.sum(np.exp(r) * (r - o)))
    targets = np.asarray(ids[1 : n + 1])
    nll = -other[np.arange(n), targets].astype(np.float64)
    return agree, max(kl / n, 0.0), float(np.exp(nll.mean()))


def peak_rss(pid: int | None) -> int | None:
    """The worker's peak resident memory (Linux's VmHWM; None elsewhere): psutil has no API
    for the peak on Linux or macOS, so /proc is read."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def reply_ids(engine: Replier, request: GenerateRequest) -> tuple[list[int], Finished | None]:
    """One reply's token ids and its Finished event (None if it never came); a Failed event
    raises EngineError."""
    reply: list[int] = []
    finished = None
    for event in engine.generate(request):
        if isinstance(event, Token):
            reply.append(event.id)
        elif isinstance(event, Finished):
            finished = event
        elif isinstance(event, Failed):
            raise EngineError(event.message)
    return reply, finished


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def disturbed_note(name: str, share: float) -> str:
    """The sentence a speed measured beside another busy program gets."""
    return (
        f"{name}'s speed was measured while other programs used {share:.0%} of the CPU: "
        "run again on a quiet machine before ranking it"
    )


def with_text_score(result: RunResult, score: perplexity.TextScore) -> RunResult:
    """The --text figures (the reference agrees with itself: KL 0, same top 100%)."""
    return replace(
        result,
        perplexity=score.ppl,
        perplexity_err=score.ppl_err,
        ppl_ratio=score.ppl_ratio,
        mean_kl=0.0 if result.is_reference else score.mean_kld,
        kld_err=score.mean_kld_err,
        kld_p99=score.kld_p99,
        top1_agreement=1.0 if result.is_reference else score.same_top,
        same_top_err=score.same_top_err,
        rms_dp=score.rms_dp,
        scored_tokens=score.scored_tokens,
        score_s=score.seconds,
    )
