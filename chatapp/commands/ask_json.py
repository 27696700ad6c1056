"""`chatapp ask --json`'s object (docs/ask-json.md): the reply, its stats, model and tokens."""

from __future__ import annotations

from typing import Any

from chatapp import breakdown, machine
from chatapp.engine.protocol import Candidate, Finished, Grammar, LoadOptions, Token
from chatapp.metrics import GenerationStats
from chatapp.models.reply_limits import limits_of_reply
from chatapp.sampling import SamplerSettings


def load_settings(info) -> dict | None:
    """How the model was run: what `ask --json` and the stats panel report."""
    if info is None:
        return None
    return {
        "threads": info.n_threads,
        "flash_attn": info.flash_attn,
        "exact_batches": info.exact_batches,
        "repack": info.repack,
        "huge_pages": info.huge_pages,
        "weights_in_memory": info.weights_in_memory,
        "extra_buffers": list(info.extra_buffers),
        "n_gpu_layers": info.n_gpu_layers,
        "tuned": info.tuned,
    }


def candidate_row(c: Candidate) -> dict:
    """One candidate in `ask --json` (docs/ask-json.md): its probability before the samplers
    (null where a server did not report it), after them, and the step that cut it."""
    return {
        "id": c.id,
        "text": c.text,
        "p": c.p if c.p == c.p else None,
        "p_after": c.p_final,
        "cut_by": c.cut_by or None,
    }


def ask_payload(
    finished: Finished,
    tokens: list[Token],
    session,
    info,
    options: LoadOptions,
    settings: SamplerSettings,
    grammar: Grammar | None,
    raw: bool,
    limits: bool = False,
) -> dict[str, Any]:
    """The object `ask --json` prints for a finished reply (`info`: the engine's ModelInfo
    after it, None when it had none; `limits`: the engine can hold it against the machine's
    ceilings)."""
    st = finished.stats
    split = session.last_split
    return {
        "text": finished.text,
        "thinking": split.thinking if split else "",  # a thinking model's reasoning
        "answer": split.answer if split and (split.thinking or split.closed) else finished.text,
        "stop_reason": str(finished.reason),
        "grammar": grammar.source if grammar is not None else None,
        "prompt_tokens": st.prompt_tokens,
        "completion_tokens": st.completion_tokens,
        "ttft_s": st.ttft_s,
        "prefill_tps": st.prefill_tps,
        "decode_tps": st.decode_tps,
        "load_s": info.load_s if info else None,
        "model": _model(info, options),
        "settings": load_settings(info),
        "sampler": settings.to_dict(),
        "raw": raw,
        "steering": session.last_steering.to_dict() if session.last_steering else None,
        "speculation": _speculation(st, info),
        "threads": _threads(st),
        "breakdown": breakdown.as_dict(st, load_s=info.load_s if info else None),
        "limits": reply_limits_dict(info, finished, options) if limits else None,
        "tokens": [_token(t) for t in tokens],
    }


def reply_limits_dict(info, finished: Finished, options: LoadOptions) -> dict[str, Any] | None:
    """The reply against this machine's ceilings (docs/how-fast.md); None where the model's
    file or the ceilings are not known here (`chatapp machine` measures them)."""
    if info is None:
        return None
    found = limits_of_reply(
        info.path, finished.stats, machine.saved_ceilings(), options.n_batch, info.n_gpu_layers
    )
    return found.to_dict() if found is not None else None


def _model(info, options: LoadOptions) -> dict[str, Any]:
    return {
        "path": info.path if info else options.model_path,
        "size_bytes": info.size_bytes if info else None,
        "quant": info.quant if info else None,
        "architecture": info.architecture if info else None,
        "n_params": info.n_params if info else None,
    }


def _speculation(st: GenerationStats, info) -> dict[str, Any]:
    return {
        "draft": st.draft,
        "draft_model": info.draft_model if info else "",
        "drafted": st.draft_tokens,
        "accepted": st.draft_accepted,
        "acceptance": st.acceptance,
        "mean_accepted": st.mean_accepted,
        "exact_batches": st.exact_batches,
    }


def _threads(st: GenerationStats) -> dict[str, Any]:
    return {
        "used": st.threads,
        "most": st.threads_most,
        "switches": [{"token": i, "threads": n, "why": w} for i, n, w in st.thread_switches],
        "busy_cores": st.busy_cores,
    }


def _token(t: Token) -> dict[str, Any]:
    return {
        "id": t.id,
        "text": t.piece.decode("utf-8", "replace"),
        "logprob": t.logprob,
        "top": [candidate_row(c) for c in t.candidates],
        "drafted": t.drafted,
    }
