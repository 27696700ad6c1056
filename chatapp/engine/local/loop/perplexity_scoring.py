"""The worker side of llama-perplexity-grade scoring: chunked prefill, per-token NLL, KLD."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from chatapp.engine.local.load.loaded_model import LoadedModel

ROWS = 64  # logit rows turned into statistics at a time (float64 copies of n_vocab columns)


@dataclass(frozen=True)
class PerplexityJob:
    """Score `text` in chunks of `n_ctx` tokens as llama-perplexity does.

    base_path names the reference's cached log-probs: written when `write_base`, else read and
    compared against (KL divergence, same top token, delta-p)."""

    text: str
    n_ctx: int
    base_path: str
    write_base: bool


def chunk_plan(n_tokens: int, n_ctx: int) -> tuple[int, int]:
    """(chunks, scored positions per chunk): whole chunks only, the second half of each scored."""
    return n_tokens // n_ctx, n_ctx - 1 - n_ctx // 2


def row_stats(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row: (max, log-sum-exp above the max, nll of the target, argmax), in float64."""
    top = logits.max(axis=1).astype(np.float64)
    lse = np.log(np.exp(logits.astype(np.float64) - top[:, None]).sum(axis=1))
    nll = top + lse - logits[np.arange(len(targets)), targets]
    return top, lse, nll, logits.argmax(axis=1)


def quantize_log_probs(logits: np.ndarray, top: np.ndarray, lse: np.ndarray) -> np.ndarray:
    """llama-perplexity's uint16 rows: [scale, min_log_prob] as float32, then a code per token
    (log-probs within 16 nats of the best, the rest as the floor)."""
    n, vocab = logits.shape
    width = 2 * ((vocab + 1) // 2) + 4
    out = np.zeros((n, width), dtype=np.uint16)
    low = np.maximum(logits.min(axis=1), top - 16).astype(np.float32)
    scale = ((top - low) / 65535.0).astype(np.float32)
    head = np.stack([scale, (low - top - lse).astype(np.float32)], axis=1)
    out[:, :4] = head.view(np.uint16)
    safe = np.where(scale > 0, scale, 1.0).astype(np.float32)
    codes = np.rint((1.0 / safe)[:, None] * (logits - low[:, None]))
    codes = np.where((logits > low[:, None]) & (scale[:, None] > 0), codes, 0)
    out[:, 4 : 4 + vocab] = codes.astype(np.uint16)
    return out


def base_log_probs(rows: np.ndarray, vocab: int) -> np.ndarray:
    """Decode quantized rows back to float32 log-probs."""
    head = np.ascontiguousarray(rows[:, :4]).view(np.float32)
    return head[:, :1] * rows[:, 4 : 4 + vocab].astype(np.float32) + head[:, 1:2]


def compare_rows(
    logits: np.ndarray, targets: np.ndarray, base: np.ndarray
) -> dict[str, np.ndarray]:
    """This file's logits against the base's quantized rows, as llama-perplexity computes them."""
    top, lse, nll, imax = row_stats(logits, targets)
    lp_base = base_log_probs(base, logits.shape[1])
    nll_base = -lp_base[np.arange(len(targets)), targets].astype(np.float64)
    lp = logits.astype(np.float64) - (top + lse)[:, None]
    kept = lp_base > -16.0
    kld = np.where(kept, np.exp(lp_base) * (lp_base - lp), 0.0).sum(axis=1)
    return {
        "nll": nll,
        "nll_base": nll_base,
        "kld": kld,
        "same_top": imax == lp_base.argmax(axis=1),
        "p_diff": np.exp(-nll) - np.exp(-nll_base),
    }


def base_files(base_path: str) -> tuple[Path, Path, Path]:
    """The cached reference: its tokens, its uint16 log-prob rows, its per-position NLL."""
    return (
        Path(base_path + ".tokens.npy"),
        Path(base_path + ".logp.u16"),
        Path(base_path + ".nll.npy"),
    )


def scored_tokens(w: LoadedModel, job: PerplexityJob) -> np.ndarray | str:
    """The text's tokens, or one sentence saying why chunks of job.n_ctx cannot score it."""
    tokens = np.asarray(w.tokenize(job.text, add_bos=w.add_bos, special=False), dtype=np.int32)
    n_ctx = job.n_ctx
    if n_ctx > w.n_ctx or n_ctx > w.n_batch:
        return (
            f"the model was loaded with a context of {w.n_ctx}; it cannot score chunks of {n_ctx}"
        )
    if len(tokens) < 2 * n_ctx:
        return (
            f"the text is {len(tokens)} tokens; scoring chunks of {n_ctx} needs at least "
            f"{2 * n_ctx}: give a longer text or a smaller --ctx"
        )
    return tokens


def open_base(job: PerplexityJob, tokens: np.ndarray, shape: tuple[int, int]) -> Any:
    """The reference's log-prob rows: a new file to fill (`write_base`, the tokens saved), else
    the cached one read; or one sentence saying why the cache does not fit this text."""
    tok_file, logp_file, _ = base_files(job.base_path)
    if job.write_base:
        Path(job.base_path).parent.mkdir(parents=True, exist_ok=True)
        np.save(tok_file, tokens)
        return np.lib.format.open_memmap(logp_file, mode="w+", dtype=np.uint16, shape=shape)
    base_tokens = np.load(tok_file)
    if base_tokens.shape != tokens.shape or not np.array_equal(base_tokens, tokens):
        return (
            "this file cuts the text into other tokens than the reference: KL divergence "
            "needs the same tokenizer (compare quantizations of one model)"
        )
    base = np.load(logp_file, mmap_mode="r")
    if base.shape != shape:
        return "the reference's cached log-probs do not match this model's vocabulary"
    return base


def decode_chunk(w: LoadedModel, chunk: np.ndarray, first: int, rows: int) -> np.ndarray | None:
    """One chunk decoded from an empty cache, logits kept from position `first` on but the
    last: those `rows` rows (a view of llama.cpp's buffer), or None when llama_decode failed."""
    lib, b = w.lib, w.batch
    n_ctx = len(chunk)
    lib.llama_memory_clear(w.mem, True)
    w.kv_tokens = []
    if w.add_bos:
        chunk[0] = w.bos_id
    for i, tok in enumerate(chunk):
        b.token[i] = int(tok)
        b.pos[i] = i
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = 0
        b.logits[i] = i >= first and i < n_ctx - 1
    b.n_tokens = n_ctx
    if lib.llama_decode(w.ctx, b) != 0:
        return None
    ptr = lib.llama_get_logits(w.ctx)
    return np.ctypeslib.as_array(ptr, shape=(rows, w.n_vocab))


def score_chunk(
    job: PerplexityJob, logits, targets, base, at: int, out: dict[str, list[np.ndarray]]
) -> None:
    """A chunk's rows, ROWS at a time, from position `at` of the scored ones: their NLL (and
    their rows written to the reference), or compared against the reference's."""
    for r in range(0, len(logits), ROWS):
        rows, tgt = logits[r : r + ROWS], targets[r : r + ROWS]
        pos = at + r
        if job.write_base:
            top, lse, nll, _ = row_stats(rows, tgt)
            base[pos : pos + len(tgt)] = quantize_log_probs(rows, top, lse)
            parts = {"nll": nll}
        else:
            parts = compare_rows(rows, tgt, base[pos : pos + len(tgt)])
        for key, value in parts.items():
            out.setdefault(key, []).append(value)


def run(
    w: LoadedModel, job: PerplexityJob, progress: Callable[[int, int, float], None]
) -> dict | str:
    """Score the whole text; returns per-position arrays, or one sentence saying what failed."""
    tokens = scored_tokens(w, job)
    if isinstance(tokens, str):
        return tokens
    n_ctx = job.n_ctx
    n_chunk, per_chunk = chunk_plan(len(tokens), n_ctx)
    tokens = tokens[: n_chunk * n_ctx]
    width = 2 * ((w.n_vocab + 1) // 2) + 4
    base = open_base(job, tokens, (n_chunk * per_chunk, width))
    if isinstance(base, str):
        return base
    first = n_ctx // 2
    out: dict[str, list[np.ndarray]] = {}
    t0 = time.perf_counter()
    for c in range(n_chunk):
        logits = decode_chunk(w, tokens[c * n_ctx : (c + 1) * n_ctx].copy(), first, per_chunk)
        if logits is None:
            w.lib.llama_memory_clear(w.mem, True)
            return f"llama_decode failed on chunk {c + 1} of {n_chunk}"
        targets = tokens[c * n_ctx + first + 1 : (c + 1) * n_ctx]
        score_chunk(job, logits, targets, base, c * per_chunk, out)
        done = (c + 1) * per_chunk
        progress(done, n_chunk * per_chunk, time.perf_counter() - t0)
    w.lib.llama_memory_clear(w.mem, True)
    w.kv_tokens = []
    if job.write_base:
        base.flush()
        del base
    result: dict[str, Any] = {key: np.concatenate(parts) for key, parts in out.items()}
    if job.write_base:
        np.save(base_files(job.base_path)[2], result["nll"])  # last: says the cache is complete
    result["n_tokens"] = len(tokens)
    result["n_chunks"] = n_chunk
    return result
