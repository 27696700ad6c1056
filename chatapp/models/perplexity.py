"""llama-perplexity-grade quality figures on a user's text: PPL, KL divergence, same top token."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Protocol

import numpy as np

from chatapp import paths
from chatapp.engine.local.loop.perplexity_scoring import PerplexityJob, base_files, chunk_plan
from chatapp.engine.protocol import EngineError, LoadOptions

MIN_COUNT = 10  # llama-perplexity's uncertainties need more than this many scored tokens

ChunkProgress = Callable[[int, int, float], None]  # (tokens scored, of how many, seconds)


class TextScorer(Protocol):
    """An engine that scores a text in chunks (LocalEngine)."""

    def perplexity(self, job: PerplexityJob, progress: ChunkProgress | None = None) -> dict: ...


def mean_and_error(values: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error, as llama-perplexity's mean_and_uncertainty computes them."""
    n = len(values)
    if n < 1:
        return 0.0, 0.0
    mean = float(values.sum() / n)
    var = float((values * values).sum() / n) - mean * mean
    return mean, math.sqrt(var / (n - 1)) if var > 0 and n > MIN_COUNT else 0.0


@dataclass(frozen=True)
class TextScore:
    """One file on one text: perplexity, and against the reference when it is not the reference."""

    scored_tokens: int
    chunks: int
    ppl: float
    ppl_err: float
    ppl_ratio: float | None = None  # PPL(this) / PPL(reference)
    ppl_ratio_err: float | None = None
    mean_kld: float | None = None
    mean_kld_err: float | None = None
    kld_p99: float | None = None
    same_top: float | None = None  # share of positions whose top token is the reference's
    same_top_err: float | None = None
    rms_dp: float | None = None  # RMS of p(this) - p(reference) for the text's next token
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(arrays: dict, seconds: float = 0.0) -> TextScore:
    """The figures llama-perplexity prints, from the worker's per-position arrays."""
    nll = np.asarray(arrays["nll"], dtype=np.float64)
    log_ppl, log_ppl_err = mean_and_error(nll)
    ppl = math.exp(log_ppl)
    alone = TextScore(len(nll), int(arrays["n_chunks"]), ppl, ppl * log_ppl_err, seconds=seconds)
    if "kld" not in arrays:
        return alone
    nll_base = np.asarray(arrays["nll_base"], dtype=np.float64)
    log_base, log_base_err = mean_and_error(nll_base)
    n = len(nll)
    cov = 0.0
    if n >= MIN_COUNT:
        cov = (float((nll * nll_base).sum()) / n - nll.mean() * nll_base.mean()) / (n - 1)
    ratio_log_err = math.sqrt(max(log_ppl_err**2 + log_base_err**2 - 2 * cov, 0.0))
    kld = np.asarray(arrays["kld"], dtype=np.float64)
    kld_mean, kld_err = mean_and_error(kld)
    dp2 = np.asarray(arrays["p_diff"], dtype=np.float64) ** 2
    mse, mse_err = mean_and_error(dp2)
    same = float(np.mean(arrays["same_top"]))
    return replace(
        alone,
        ppl_ratio=math.exp(log_ppl - log_base),
        ppl_ratio_err=math.exp(log_ppl - log_base) * ratio_log_err,
        mean_kld=kld_mean,
        mean_kld_err=kld_err,
        kld_p99=float(np.percentile(kld.astype(np.float32), 99.0)),
        same_top=same,
        same_top_err=math.sqrt(same * (1 - same) / (n - 1)) if n > 1 else 0.0,
        rms_dp=math.sqrt(mse),
    )


def base_cache_path(
    reference: str | Path, text: str, n_ctx: int, options: LoadOptions | None = None
) -> Path:
    """Where the reference's log-probs for this text and chunk size are kept (reused by every
    later file and run, like llama-perplexity's --kl-divergence-base). The key holds what
    moves the figures: the file, the text, the chunk size, llama.cpp's version and the load
    options that change the arithmetic (flash attention, GPU layers, repack, exact batches)."""
    ref = Path(reference).resolve()
    stat = ref.stat()
    numerics = (
        ("-", "-", "-")
        if options is None
        else (options.flash_attn, options.n_gpu_layers, options.repack, options.exact_batches)
    )
    key = (
        f"{ref}|{stat.st_size}|{stat.st_mtime_ns}|{n_ctx}|{_llama_version()}|{numerics}|".encode()
        + text.encode()
    )
    name = f"{ref.stem}-ctx{n_ctx}-{hashlib.sha256(key).hexdigest()[:16]}"
    return paths.cache_dir() / "kld-base" / name


def _llama_version() -> str:
    try:
        return metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        return "?"


def base_cached(base: Path) -> bool:
    """Whether a complete reference is cached (its NLL file is written last)."""
    return all(f.exists() for f in base_files(str(base)))


def read_text(path: str | Path) -> str:
    """The text to score; one sentence when it cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise EngineError(f"cannot read the text file {path}: {exc.strerror or exc}") from exc
    text = data.decode("utf-8", errors="replace")
    if not text.strip():
        raise EngineError(f"the text file {path} is empty")
    return text


def score_file(
    engine: TextScorer,
    text: str,
    n_ctx: int,
    base: Path,
    is_reference: bool,
    progress: ChunkProgress | None = None,
) -> TextScore:
    """One loaded file on the text: the reference writes the base (unless cached), others
    compare against it."""
    t0 = time.perf_counter()
    if is_reference and base_cached(base):  # scored before: its NLL is in the cache
        nll = np.load(base_files(str(base))[2])
        arrays = {"nll": nll, "n_chunks": len(nll) // chunk_plan(0, n_ctx)[1]}
    else:
        job = PerplexityJob(text=text, n_ctx=n_ctx, base_path=str(base), write_base=is_reference)
        arrays = engine.perplexity(job, progress)
    return summarize(arrays, time.perf_counter() - t0)


ProgressFactory = Callable[[str], ChunkProgress | None]
