"""Why a reply took as long as it did: its time cut into parts, and a verdict naming the biggest."""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.metrics import GenerationStats
from chatapp.stats_text import decode_text, prefill_text


@dataclass(frozen=True)
class Part:
    """One stretch of a reply's time."""

    name: str  # load, tune wait, template, tokenize, prefill, first token, decode, ui
    seconds: float
    detail: str


def parts(st: GenerationStats, load_s: float | None = None, ui_s: float | None = None):
    """The reply's time in the order it was spent. `load_s`: the model's load, when this reply
    waited for it; `ui_s`: what the UI added before the first token showed (first paint minus
    the engine's TTFT and the wait behind the tune, ui_share())."""
    out: list[Part] = []
    if load_s:
        out.append(Part("load", load_s, "loading the model file"))
    if st.tune_wait_s > 0:
        stop = "the tune on first use stopping the step it was in"
        out.append(Part("tune wait", st.tune_wait_s, stop))
    out.append(Part("template", st.template_s, "rendering the chat template"))
    out.append(Part("tokenize", st.tokenize_s, f"{st.prompt_tokens:,} prompt tokens"))
    reused = st.prompt_tokens - st.prompt_evaluated
    rate = f" at {prefill_text(st.prefill_tps)}" if st.prefill_tps else ""
    out.append(
        Part(
            "prefill",
            st.prefill_s,
            f"{st.prompt_evaluated:,} new prompt tokens{rate}; "
            + (f"{reused:,} reused from the cache" if reused > 0 else "nothing reused"),
        )
    )
    if st.ttft_s is not None:
        first = st.ttft_s - st.template_s - st.tokenize_s - st.prefill_s
        out.append(Part("first token", max(0.0, first), "sampling the first token"))
    if st.completion_tokens > 1:
        speed = f" at {decode_text(st.decode_tps)}" if st.decode_tps else ""
        extra = ""
        if st.draft_tokens:
            extra = f"; {st.draft_accepted}/{st.draft_tokens} draft tokens accepted"
        out.append(
            Part("decode", st.decode_s, f"{st.completion_tokens - 1:,} more tokens{speed}{extra}")
        )
    if ui_s is not None:
        out.append(Part("ui", max(0.0, ui_s), "the UI, submit to first paint beyond the engine"))
    return out


def ui_share(st: GenerationStats, first_paint_s: float | None) -> float | None:
    """What the UI added before the first token showed: submit to first paint, less the
    engine's TTFT and the wait behind the tune (the worker's, not the UI's)."""
    if first_paint_s is None or st.ttft_s is None:
        return None
    return first_paint_s - st.ttft_s - st.tune_wait_s


def verdict(st: GenerationStats, load_s: float | None = None, ui_s: float | None = None) -> str:
    """One line naming where most of the reply's time went, e.g. "prefill: 3,120 new prompt
    tokens at 205 t/s; nothing reused"."""
    found = parts(st, load_s, ui_s)
    if not found:
        return ""
    top = max(found, key=lambda p: p.seconds)
    total = sum(p.seconds for p in found) or 1.0
    return f"{top.name}: {top.detail} ({top.seconds:.2f} s, {top.seconds / total:.0%} of the time)"


def as_dict(st: GenerationStats, load_s: float | None = None, ui_s: float | None = None) -> dict:
    """The breakdown as JSON-able data (`chatapp ask --json`)."""
    return {
        "parts": [
            {"name": p.name, "s": p.seconds, "detail": p.detail} for p in parts(st, load_s, ui_s)
        ],
        "verdict": verdict(st, load_s, ui_s),
    }
