"""Generation timing: stats from child-side timestamps and a rolling rate meter (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GenerationStats:
    """What one reply cost, from timestamps taken next to the decode calls."""

    prompt_tokens: int = 0
    """Tokens of the templated prompt (reused + evaluated)."""
    prompt_evaluated: int = 0
    """Prompt tokens evaluated for this reply (the rest came from the KV cache)."""
    completion_tokens: int = 0
    ttft_s: float | None = None
    """Request received -> first token sampled (includes prompt evaluation)."""
    prefill_s: float = 0.0
    decode_s: float = 0.0
    """First token -> last token."""
    n_past: int = 0
    """Tokens in the context after the reply."""
    n_ctx: int = 0
    template_s: float = 0.0
    """Rendering the chat template (in the worker, before prefill)."""
    tokenize_s: float = 0.0
    """Tokenizing the rendered prompt."""
    tune_wait_s: float = 0.0
    """Request sent -> the worker began it, when the tune on first use was on: the wait for
    the tune's step in progress (0 when no tune was on)."""
    draft_tokens: int = 0
    """Speculative decoding: draft tokens proposed and checked by the model."""
    draft_accepted: int = 0
    """... and how many of them the model's own sampling agreed with (used as they were)."""
    draft_batches: int = 0
    """Verification batches that held at least one draft token."""
    draft: str = ""
    """Where drafts came from: "ngram", "model", or "" (no speculation)."""
    exact_batches: bool = False
    """The reply ran where a batch's rows are one-token decodes' bit for bit (drafted text is
    then the text without drafts)."""
    threads: int = 0
    """llama.cpp's threads when the reply ended (0: not known, as from a server)."""
    threads_most: int = 0
    """The count on a quiet machine (tuned); fewer while another program took a core."""
    thread_switches: tuple[tuple[int, int, str], ...] = ()
    """(token index, threads, why) for each change during the reply."""
    busy_cores: float | None = None
    """Cores other programs used at the last reading during the reply (None: not read)."""

    @property
    def acceptance(self) -> float | None:
        """Share of draft tokens accepted (None without speculation)."""
        return self.draft_accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_accepted(self) -> float | None:
        """Draft tokens accepted per verification batch."""
        return self.draft_accepted / self.draft_batches if self.draft_batches else None

    @property
    def prefill_tps(self) -> float | None:
        if self.prompt_evaluated <= 0 or self.prefill_s <= 0:
            return None
        return self.prompt_evaluated / self.prefill_s

    @property
    def decode_tps(self) -> float | None:
        if self.completion_tokens < 2 or self.decode_s <= 0:
            return None
        return (self.completion_tokens - 1) / self.decode_s

    def to_dict(self) -> dict:
        data = asdict(self)
        data["prefill_tps"] = self.prefill_tps
        data["decode_tps"] = self.decode_tps
        data["acceptance"] = self.acceptance
        data["mean_accepted"] = self.mean_accepted
        data["thread_switches"] = [list(s) for s in self.thread_switches]  # as JSON reads back
        return data


def stats_from_times(
    *,
    t_request: float,
    t_prefill_start: float,
    t_prefill_end: float,
    token_times: list[float],
    prompt_tokens: int,
    prompt_evaluated: int,
    n_past: int,
    n_ctx: int,
    **extra,
) -> GenerationStats:
    """Build GenerationStats from perf_counter timestamps (`extra`: the other fields)."""
    return GenerationStats(
        prompt_tokens=prompt_tokens,
        prompt_evaluated=prompt_evaluated,
        completion_tokens=len(token_times),
        ttft_s=(token_times[0] - t_request) if token_times else None,
        prefill_s=max(0.0, t_prefill_end - t_prefill_start),
        decode_s=(token_times[-1] - token_times[0]) if len(token_times) > 1 else 0.0,
        n_past=n_past,
        n_ctx=n_ctx,
        **extra,
    )


def median(values: Iterable[float]) -> float:
    """Median of non-empty values."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
