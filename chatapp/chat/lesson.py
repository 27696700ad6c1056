"""The lesson: inference in order, each step written from the numbers of this session."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chatapp import jsonfile, paths
from chatapp.chat.live_reply import LiveReply
from chatapp.engine.inspection import Inspection
from chatapp.engine.protocol import ModelInfo
from chatapp.engine.steering import Meter, Steering, SteerVector
from chatapp.models.compare_result import CompareResult, RunResult
from chatapp.models.device_speeds import DEVICES, GB
from chatapp.models.fit import gib, what_if
from chatapp.stats_text import decode_text, ms_text
from chatapp.textsafe import token_display

LESSON_FILE = "lesson.json"
SEND_FIRST = (
    "Send a message first (the box at the bottom; F3 shows the chat): this step's numbers "
    "come from it."
)


@dataclass
class Measured:
    """What this session measured beside its replies, kept for the lesson's later steps: the
    last logit lens (the Inside tab), concept meter (the Steer tab: the vector's name and its
    reading) and comparison (F10). The chat session holds one; the chat screen and the app
    fill it in as each arrives (None: not yet)."""

    lens: Inspection | None = None
    meter: tuple[str, Meter] | None = None
    compare: CompareResult | None = None


@dataclass(frozen=True)
class Facts:
    """What a step's text is written from: all measured in this session (None: not yet)."""

    info: ModelInfo | None = None
    reply: LiveReply | None = None  # the last reply (its stats and limits once finished)
    ceilings: dict[str, Any] | None = None  # machine.saved_ceilings()
    memory_bytes: int | None = None  # memory free for a model here
    steering: Steering | None = None  # in use now, for the next replies (the Steer tab's)
    steered: Steering | None = None  # the last reply's, with its changes (None: unsteered)
    measured: Measured = field(default_factory=Measured)  # the last lens, meter and compare


@dataclass(frozen=True)
class Step:
    """One step: what it is about, the panel it opens, what to try, and its text."""

    id: str
    title: str
    panel: str  # a tab id of the chat's side panels, or "stats" (the Speed panel)
    try_: str
    text: Callable[[Facts], str]

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "panel": self.panel, "try": self.try_}


def _card(f: Facts) -> str:
    i = f.info
    if i is None:
        return "The model is still loading: its card appears here once it is ready."
    params = f"{i.n_params / 1e6:,.0f} M parameters" if i.n_params else "its parameters"
    return (
        f"{Path(i.path).name}: {params} ({i.quant or 'precision unknown'}), "
        f"{i.n_layers} layers, a vocabulary of {i.n_vocab:,} tokens, "
        f"{gib(i.size_bytes)} on disk, loaded in {i.load_s:.1f} s. A reply is computed from "
        "these numbers, one token at a time; nothing is looked up."
    )


def _tokens(f: Facts) -> str:
    prompt = f.reply.prompt if f.reply else None
    if prompt is None:
        return "Type any sentence in the Tokens tab's box to see its tokens and ids. " + SEND_FIRST
    n = prompt.n_new + prompt.n_reused
    return (
        f"Your last message became a prompt of {n} tokens after the chat "
        f"template ({prompt.n_new} read now, {prompt.n_reused} reused from the cache). "
        "F4 shows the prompt the model really reads; F5 the ids."
    )


def _stream(f: Facts) -> str:
    r = f.reply
    if r is None or r.finished is None:
        return SEND_FIRST
    st = r.finished.stats
    return (
        f"The last reply: the wait before its first token (TTFT) was {ms_text(st.ttft_s)}, "
        f"reading the prompt's {st.prompt_evaluated} tokens; then "
        f"{decode_text(st.decode_tps or r.decode_tps)} for {st.completion_tokens} tokens, "
        "each one a full pass through the model. The sparkline is each token's pace."
    )


def _probs(f: Facts) -> str:
    r = f.reply
    tok = r.new[0] if r is not None and r.new else None
    if tok is None or not tok.candidates:
        return SEND_FIRST
    best = tok.candidates[0]
    name = best.piece.decode("utf-8", "replace")
    s = r.settings if r is not None else None
    knobs = f"temperature {s.temperature}, top-p {s.top_p}" if s else "the samplers"
    return (
        f"The first token of the last reply: {len(tok.candidates)} candidates shown; the best, "
        f"{name!r}, had p {best.p:.2f} before the samplers and {best.p_final:.2f} after "
        f"({knobs}). Move temperature or top-p (F6) during a reply; Enter on a row picks it."
    )


def _p(p: float) -> str:
    return "-" if math.isnan(p) else f"{p:.2f}"


def _inside(f: Facts) -> str:
    found = f.measured.lens
    if found is None:
        depths = f"each of the {f.info.n_layers} layers" if f.info else "each layer"
        return (
            f"The logit lens reads the model's guess after {depths}, as if it stopped there. "
            "After a reply it runs when this tab opens, on the reply's last token (or the one "
            "selected in the Tokens tab); r runs it again."
        )
    if not found.lens_ok or len(found.layers) < 3:
        return f"The lens could not read the layers: {found.lens_note or 'none came back'}"
    layers = found.layers[1:-1]  # 1..N (0: the embedding; the last: the model's own output)
    n, word = len(layers), token_display(found.chosen.piece)
    first = next((lens.layer for lens in layers if lens.chosen_rank == 1), None)
    half = layers[max(n // 2, 1) - 1]
    became = (
        f"became the lens's top token at layer {first} of {n}"
        if first is not None
        else f"was never the lens's top token (rank {layers[-1].chosen_rank} at layer {n})"
    )
    near = next((m for m in found.neighbours if m.id != found.chosen.id), None)
    nearest = f" Nearest in the embedding: {token_display(near.piece)!r}." if near else ""
    return (
        f"The lens on {word!r} (position {found.position}): it {became}; its p was "
        f"{_p(half.chosen_p)} at layer {half.layer} and {_p(layers[-1].chosen_p)} at layer {n}: "
        f"the guess sharpens with depth.{nearest}"
    )


def _vectors(vectors: tuple[SteerVector, ...], steering: Steering) -> str:
    shown = ", ".join(f"{v.name!r} {v.strength:+.2f}" for v in vectors) or "no vector"
    if not steering.layer_start and not steering.layer_end:
        return f"{shown} at every layer"
    return f"{shown} on layers {steering.layer_start or 1}-{steering.layer_end or 'last'}"


def _steer(f: Facts) -> str:
    last = f.steered
    if last is not None and (last.active or last.changes) and f.reply and f.reply.finished:
        return _steered(f.reply, last, f.measured.meter)
    now = f.steering
    if now is not None and now.active:
        return (
            f"{_vectors(now.vectors, now)} is in use: send a message and the reply leans "
            "toward it, token by token; its figures appear here."
        )
    width = f.info.n_embd if f.info else 0
    return (
        f"A concept vector is {width or 'as many'} numbers, added to the residual stream at "
        "the layers you choose. Pick one (happy is built in), Add, move its slider, then "
        "send a message: the reply leans toward it, live."
    )


def _steered(reply: LiveReply, steering: Steering, meter: tuple[str, Meter] | None) -> str:
    """The last reply, steered: its vectors, strengths, layers and figures, and the meter."""
    vectors = steering.changes[-1][1] if steering.changes else steering.vectors
    moved = f" (changed mid-reply from token {steering.changes[0][0]})" if steering.changes else ""
    st = reply.finished.stats if reply.finished else None
    n = st.completion_tokens if st else len(reply.new)
    pace = decode_text(st.decode_tps if st and st.decode_tps else reply.decode_tps)
    return (
        f"The last reply was steered by {_vectors(vectors, steering)}{moved}: "
        f"{n} tokens at {pace}. " + _meter_reading(meter)
    )


def _meter_reading(meter: tuple[str, Meter] | None) -> str:
    """The concept meter's reading in words: the token that leans most along the vector."""
    if meter is None:
        return "Press m here: the concept meter reads the reply along the vector."
    name, found = meter
    layer = found.middle_layer
    rows = found.projections[1:] if found.sink else found.projections
    values = rows[:, layer - 1].astype(np.float64) if layer and len(rows) else np.array([np.nan])
    if not np.isfinite(values).any():
        return f"The concept meter found no {name!r} direction at layer {layer}."
    above = values - float(np.nanmedian(values))
    best = int(np.nanargmax(above))
    piece = found.tokens[best + 1 if found.sink else best].piece
    return (
        f"The meter along {name!r} at layer {layer}: {token_display(piece)!r} leans most its "
        f"way, {above[best]:+.1f} from the reply's median."
    )


def _gpu(f: Facts) -> str:
    lim = f.reply.limits if f.reply else None
    if lim is None:
        peak = (f.ceilings or {}).get("mem_read_gbps")
        if not peak:
            return (
                "This machine's ceilings are not measured yet: run `chatapp machine` "
                "(under 3 s), then send a message."
            )
        if f.reply is not None and f.reply.finished is not None:  # it came before them
            return (
                f"This machine reads memory at {peak:.0f} GB/s (measured since your last "
                "reply): send another message to see a reply's bytes per token against it."
            )
        return f"This machine reads memory at {peak:.0f} GB/s (measured). " + SEND_FIRST
    ceilings = ", ".join(
        f"{d.name.split(' (')[0]} {d.bandwidth_gbps * GB / lim.bytes_per_token:,.0f} t/s"
        for d in DEVICES[2:]
    )
    return (
        f"Each token of the last reply read {gib(lim.bytes_per_token)} and did "
        f"{lim.flops_per_token / 1e9:.2f} GFLOPs: {lim.decode_gbps:.1f} GB/s of this machine's "
        f"measured {lim.mem_peak_gbps:.0f} GB/s ({lim.bound}-bound). The same bytes on a "
        f"GPU's bandwidth: {ceilings} at most."
    )


def _fit(f: Facts) -> str:
    if f.info is None or not f.memory_bytes:
        return "Wait for the model to load: this step compares it with this machine's memory."
    name, rows = what_if(8.0, f.memory_bytes)
    fits = [r.quant for r in rows if r.fits]  # (the rows go from the most bits to the fewest)
    bigger = f"a model like {name} fits at {fits[0]} or below" if fits else f"{name} fits at none"
    here = f"This model takes {gib(f.info.size_bytes)} of the {gib(f.memory_bytes)} free here; "
    compare = f.measured.compare
    if compare is None:
        return (
            f"{here}{bigger}. Fewer bits per weight: smaller and faster, a little less exact. "
            "F10 quantizes this model in seconds and compares the files: run it, come back."
        )
    runs = "; ".join(_run(r) for r in compare.runs[:MAX_RUNS])
    return f"{here}{bigger}. Your F10 compare: {runs}."


MAX_RUNS = 3  # the compare's files quoted (the strip has four lines)


def _run(r: RunResult) -> str:
    """One file of a compare: its size, decode pace and quality against the reference."""
    label = r.quant or r.name
    if r.error:
        return f"{label} failed"
    if r.is_reference:
        quality = " (the reference)"
    elif r.mean_kl is not None:
        agree = f", top-1 {r.top1_agreement:.0%}" if r.top1_agreement is not None else ""
        quality = f", KLD {r.mean_kl:.4f}{agree}"
    else:
        quality = f", {r.same_prefix_tokens} tokens as the reference's"
    return f"{label} {gib(r.size_bytes)} {decode_text(r.decode_tps)}{quality}"


STEPS: tuple[Step, ...] = (
    Step("inference", "What inference is", "stats", "F9 opens the model card", _card),
    Step("tokens", "Text becomes tokens", "tab-tokens", "type a sentence in the box", _tokens),
    Step("stream", "One token at a time", "stats", "send a message, watch TTFT and t/s", _stream),
    Step("probs", "Probabilities", "tab-probs", "move temperature mid-reply (F6)", _probs),
    Step("inside", "Inside the model", "tab-inside", "a token in Tokens, r in Inside", _inside),
    Step("steer", "Touch it: steering", "tab-steer", "Add a vector, slide it, send", _steer),
    Step("gpu", "Why a GPU", "tab-limits", "read the roofline after a reply", _gpu),
    Step("fit", "The model has to fit", "stats", "F10: quantize, then Run", _fit),
)
IDS = tuple(s.id for s in STEPS)


def step_index(step_id: str) -> int:
    """The index of a step by its id; ValueError naming the ids when there is none."""
    if step_id not in IDS:
        raise ValueError(f"no lesson step {step_id!r}: the steps are {', '.join(IDS)}")
    return IDS.index(step_id)


def _path() -> Path:
    return paths.data_dir() / LESSON_FILE


def remembered() -> int:
    """The step where the lesson stopped (0: the first, when none is saved or it is unknown)."""
    step = jsonfile.read_dict(_path()).get("step")
    return IDS.index(step) if step in IDS else 0


def remember(index: int) -> None:
    """Keep where the lesson is (a failed write only loses the place)."""
    try:
        paths.write_json_atomic(_path(), {"step": IDS[index]})
    except OSError:
        pass
